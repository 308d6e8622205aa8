//! ConfigHub's typed functions in the runner: served over HTTP and gRPC ([`serving`]), with the
//! functions evaluator plugins contribute ([`contributed`]). The `do`, `doseq`, `list` and
//! `listpaths` commands are in `commands::confighub`.

pub mod contributed;
pub mod serving;
