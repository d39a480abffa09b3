//! grep and glob. (Being built in part 3.)
