//! Test support: a loopback HTTP server, workspaces, helpers.
#![allow(dead_code)]
