//! Converts the embedded default configuration to JSON once, at build time: reading it as JSON
//! costs a short `krm-runner fn` call about a tenth of the instructions reading YAML did. And
//! links `krm-runner` at a fixed address.

use std::path::Path;

fn main() {
    // `krm-runner` runs one function call per process, so its start is most of its time. As a
    // position-independent executable, every start has the loader write 16,000 addresses into
    // 80 of its pages (a quarter of the page faults of a 10-object `fn set-namespace`). Linked
    // at a fixed address, as Go links kpt's functions by default, it has none to write; its
    // libraries, plugins, heap and stack are still placed at random. `krm-runner-server`, the
    // long-running one, stays position-independent.
    println!("cargo:rustc-link-arg-bin=krm-runner=-no-pie");
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
