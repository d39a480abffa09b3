//! Composable wrappers. (Being built in part 3.)
