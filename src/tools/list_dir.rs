//! The `list_dir` tool. (Being built in part 4.)
