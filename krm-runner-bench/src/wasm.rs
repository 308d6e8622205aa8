//! `--only wasm`: a function as a native executable (exec) and as a WASI module (wasm).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use krm_runner::Config;

use krm_kube_standin::image::ScratchImage;

use super::pod_world;
use super::{
    BenchArgs, BenchServer, PROCESS_RUNS, beside_this, ms, percentiles, spawn_with_input,
    timed_call,
};

/// The C set-namespace of `tests/wasm/` as a native executable (exec) and as a WASI module
/// (wasm), over 100 ConfigMaps: see the crate's documentation.
pub async fn run(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/wasm/set-namespace.c");
    let dir = std::env::temp_dir().join(format!("krm-runner-bench-wasm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = async {
        let native = dir.join("set-namespace");
        let module = dir.join("set-namespace.wasm");
        // For a pod's scratch image, which has no C library to link against.
        let linked_in = dir.join("set-namespace-static");
        for (target, output) in [
            (None, &native),
            (Some("--target=wasm32-wasi"), &module),
            (Some("-static"), &linked_in),
        ] {
            let mut clang = Command::new("clang");
            clang.args(target).arg("-O2").arg("-o").arg(output).arg(&source);
            let built = clang
                .output()
                .context("running clang (the wasm measurement needs clang and wasi-libc)")?;
            if !built.status.success() {
                bail!("clang failed: {}", String::from_utf8_lossy(&built.stderr));
            }
        }
        let mut input =
            String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
        for index in 0..100 {
            input.push_str(&format!(
                "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: bench-{index}\n  data:\n    key: value\n"
            ));
        }
        input.push_str("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fn\n  data:\n    namespace: bench\n");
        let input = input.into_bytes();
        let evaluators = |cache: &Path| {
            format!(
                "  exec:\n    plugin: exec\n    config:\n      functions:\n        - {{image: bench/set-namespace-native, path: \"{}\"}}\n  wasm:\n    plugin: wasm\n    config:\n      cache_dir: \"{}\"\n      functions:\n        - {{image: bench/set-namespace-wasm, path: \"{}\"}}\n  default:\n    plugin: multi\n    config: {{chain: [exec, wasm]}}\n",
                native.display(),
                cache.display(),
                module.display()
            )
        };

        // Whole `krm-runner fn` processes: a fresh cache each (compiling), then a filled one.
        let plugin_dirs = serde_json::to_string(&base.plugin_dirs)?;
        let fn_config = |cache: &Path| -> anyhow::Result<PathBuf> {
            let file = dir.join("fn.yaml");
            std::fs::write(
                &file,
                format!("plugin_dirs: {plugin_dirs}\nevaluators:\n{}", evaluators(cache)),
            )?;
            Ok(file)
        };
        let launcher = beside_this(krm_runner::FUNCTION_EXECUTABLE)?;
        let run_fn = |config: &Path| -> anyhow::Result<Duration> {
            let mut command = Command::new(&launcher);
            command
                .arg("fn")
                .arg("--config-file")
                .arg(config)
                .arg("bench/set-namespace-wasm");
            let started = Instant::now();
            let output = spawn_with_input(command, &input)?;
            let elapsed = started.elapsed();
            if !String::from_utf8_lossy(&output).contains("namespace: bench") {
                bail!("krm-runner fn did not run the module");
            }
            Ok(elapsed)
        };
        let mut compiling = Vec::new();
        for run in 0..5 {
            let cache = dir.join(format!("cache-{run}"));
            compiling.push(run_fn(&fn_config(&cache)?)?);
        }
        let warm_cache = dir.join("cache-0");
        let config = fn_config(&warm_cache)?;
        let mut cached = Vec::with_capacity(PROCESS_RUNS);
        let mut spawned = Vec::with_capacity(PROCESS_RUNS);
        for _ in 0..PROCESS_RUNS {
            cached.push(run_fn(&config)?);
            let started = Instant::now();
            spawn_with_input(Command::new(&native), &input)?;
            spawned.push(started.elapsed());
        }

        // Warm calls over gRPC, alternating; with the static executable in a warm pod of the
        // Kubernetes API stand-in too, when podman can run one.
        let world = if krm_kube_standin::fixture::require_podman("the warm pod of the wasm measurement") {
            Some(tokio::task::spawn_blocking(pod_world::pod_world).await?)
        } else {
            None
        };
        let pod_image = match &world {
            Some(world) => {
                let image = ScratchImage {
                    files: vec![(linked_in.clone(), "/set-namespace".to_owned())],
                    entrypoint: vec!["/set-namespace".to_owned()],
                    ..ScratchImage::default()
                };
                let pushed = tokio::task::block_in_place(|| {
                    world.cluster.push(&image, "krm/set-namespace:v1")
                })?;
                Some(pushed)
            }
            None => None,
        };
        let mut evaluators = evaluators(&warm_cache);
        if let Some(world) = &world {
            evaluators = evaluators.replace("{chain: [exec, wasm]}", "{chain: [exec, wasm, pod]}");
            evaluators.push_str(&pod_world::pod_evaluator(&world.cluster, &world.wrapper, ""));
        }
        let mut server = BenchServer::start_with(base, &[], &evaluators, "{enabled: false}").await?;
        let calls = async {
            let mut images = vec!["bench/set-namespace-native", "bench/set-namespace-wasm"];
            images.extend(pod_image.as_deref());
            let mut timings = vec![Vec::with_capacity(args.calls); images.len()];
            for _ in 0..50 {
                for image in &images {
                    server.call(image, &input).await?;
                }
            }
            for _ in 0..args.calls {
                for (image, timing) in images.iter().zip(&mut timings) {
                    timing.push(timed_call(&mut server, image, "", &input).await?);
                }
            }
            anyhow::Ok(timings.iter_mut().map(|timing| percentiles(timing)).collect::<Vec<_>>())
        }
        .await;
        server.stop();
        let figures = calls?;
        let (native_p50, native_p99) = figures[0];
        let (module_p50, module_p99) = figures[1];

        println!("\n## set-namespace in C, 100 ConfigMaps: native executable (exec) vs WASI module (wasm)");
        println!("| what | native executable | WASI module |\n|---|---|---|");
        println!(
            "| `krm-runner fn`, module compiled in the call (median of 5) | | {} |",
            ms(percentiles(&mut compiling).0)
        );
        println!(
            "| `krm-runner fn`, module compiled before (median of {PROCESS_RUNS}) | the executable spawned alone: {} | {} |",
            ms(percentiles(&mut spawned).0),
            ms(percentiles(&mut cached).0)
        );
        println!("| warm gRPC call p50 | {} | {} |", ms(native_p50), ms(module_p50));
        println!("| warm gRPC call p99 | {} | {} |", ms(native_p99), ms(module_p99));
        if let Some(&(pod_p50, pod_p99)) = figures.get(2) {
            println!(
                "| the static executable in a warm pod (stand-in), p50 / p99 | {} / {} | |",
                ms(pod_p50),
                ms(pod_p99)
            );
        }
        anyhow::Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}
