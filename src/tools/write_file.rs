//! The `write_file` tool. (Being built in part 4.)
