//! The `glob` tool. (Being built in part 4.)
