//! Applying a parsed v4a patch. (Being built in part 4.)
