//! Sessions: the agentic loop on a worker thread. (Being built in part 5.)
