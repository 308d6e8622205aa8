//! Converts the embedded default configuration to JSON once, at build time: reading it as JSON
//! costs a short `krm-runner fn` call about a tenth of the instructions reading YAML did. And
//! links `krm-runner` at a fixed address, with the functions a call's start runs laid out
//! together.

use std::path::Path;

fn main() {
    // `krm-runner` runs one function call per process, so its start is most of its time. As a
    // position-independent executable, every start has the loader write 16,000 addresses into
    // 80 of its pages (a quarter of the page faults of a 10-object `fn set-namespace`). Linked
    // at a fixed address, as Go links kpt's functions by default, it has none to write; its
    // libraries, plugins, heap and stack are still placed at random. `krm-runner-server`, the
    // long-running one, stays position-independent.
    println!("cargo:rustc-link-arg-bin=krm-runner=-no-pie");
    order_start_up_functions();
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

/// `krm-runner/start-up.order` lists the functions a `krm-runner fn` call runs (written by
/// `krm-runner/start-up-order.sh`). Laid out first and together, they take a few pages of code
/// instead of one here and there across the executable's 3 MB: 35 fewer page faults, and a
/// 10-object call 15% faster next to `cat`. The list names mangled symbols, whose hashes
/// change with the toolchain and the dependencies; names it no longer matches are skipped,
/// and the start slows back down until the script is run again.
///
/// Only LLD reads such a list. It links for rustc 1.90 and later on x86_64 Linux, which this
/// build script's own executable shows (`.comment` names the linker); with another linker, or
/// when cross-compiling, the layout stays the linker's. The list names release symbols, so
/// other profiles keep theirs too.
fn order_start_up_functions() {
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("start-up.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let release = std::env::var("PROFILE").is_ok_and(|profile| profile == "release");
    let cross = std::env::var("TARGET").ok() != std::env::var("HOST").ok();
    let linked_by_lld = std::env::current_exe()
        .and_then(std::fs::read)
        .is_ok_and(|bytes| bytes.windows(12).any(|w| w == b"Linker: LLD "));
    if !release || cross || !linked_by_lld || !order.exists() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=krm-runner=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bin=krm-runner=-Wl,--no-warn-symbol-ordering");
}
