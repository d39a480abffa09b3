//! The `edit_file` tool. (Being built in part 4.)
