//! System prompt layers. (Being built in part 6.)
