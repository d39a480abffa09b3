//! Subagents. (Being built in part 6.)
