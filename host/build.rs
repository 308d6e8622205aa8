//! Converts the embedded default configuration to JSON once, at build time: reading it as JSON
//! costs a short `krm-runner fn` call about a tenth of the instructions reading YAML did.

use std::path::Path;

fn main() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/krm-runner.yaml");
    println!("cargo:rerun-if-changed={}", source.display());
    let text = std::fs::read_to_string(&source)
        .unwrap_or_else(|e| panic!("reading {}: {e}", source.display()));
    let value: serde_json::Value = yaml_serde::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", source.display()));
    let out =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("krm-runner.json");
    std::fs::write(&out, value.to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
}
