//! The official MCP servers installed by `.ci/run`.
