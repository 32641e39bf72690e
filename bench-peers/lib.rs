//! Nothing here: the package holds benchmarks against peer crates (see
//! `benches/`), kept out of the workspace.
