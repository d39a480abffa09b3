//! The `grep` tool. (Being built in part 4.)
