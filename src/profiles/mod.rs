//! Provider profiles. (Being built in part 6.)
