//! The official conformance runner against our client.
