//! Overflow errors of every provider shape lead to one compaction and one retry.
