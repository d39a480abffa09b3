//! The `shell` tool. (Being built in part 4.)
