//! The OpenAI Chat Completions wire format, spoken by many servers. (Being built in part 2.)
