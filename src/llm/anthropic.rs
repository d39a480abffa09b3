//! The Anthropic Messages wire format. (Being built in part 1.)
