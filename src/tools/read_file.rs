//! The `read_file` tool. (Being built in part 4.)
