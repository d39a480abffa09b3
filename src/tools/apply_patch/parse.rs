//! Parsing the v4a patch format. (Being built in part 4.)
