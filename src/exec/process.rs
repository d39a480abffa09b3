//! Process-group spawning and killing. (Being built in part 3.)
