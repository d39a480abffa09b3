//! A scripted offline model. (Being built in part 5.)
