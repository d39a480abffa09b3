//! The OpenAI Responses wire format. (Being built in part 2.)
