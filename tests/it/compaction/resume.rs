//! Resume and strict replay of a compacted session.
