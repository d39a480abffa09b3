//! `apply_patch`: the v4a patch format. (Being built in part 4.)

mod apply;
mod parse;
