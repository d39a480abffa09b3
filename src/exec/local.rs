//! LocalExecutionEnvironment. (Being built in part 3.)
