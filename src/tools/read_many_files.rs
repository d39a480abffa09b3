//! The `read_many_files` tool. (Being built in part 4.)
