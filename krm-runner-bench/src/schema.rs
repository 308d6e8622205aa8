//! `schema`: what carrying the Kubernetes schema costs. It is deflated into every binary that
//! links `krm-kube-schema` and inflated on first use only, so the figures are its bytes, its
//! first load, and whole processes that load it against the same processes that do not.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::{beside_this, deployments, indent_items, ms, percentiles, status_kib};

pub fn run(runs: usize) -> anyhow::Result<()> {
    println!(
        "\n## Kubernetes schema (Kubernetes {})",
        krm_kube_schema::KUBERNETES_VERSION
    );
    println!("| what | measured |\n|---|---|");
    println!(
        "| deflated schema in each binary | {:.1} KiB |",
        krm_kube_schema::deflated_len() as f64 / 1024.0
    );
    let pid = std::process::id();
    let before = status_kib(pid, "VmRSS:").context("VmRSS")?;
    let started = Instant::now();
    let schema = krm_kube_schema::schema().map_err(|e| anyhow::anyhow!("{e}"))?;
    let first = started.elapsed();
    let after = status_kib(pid, "VmRSS:").context("VmRSS")?;
    println!(
        "| first load (inflate and parse), in this process | {} |",
        ms(first)
    );
    println!(
        "| resident memory the loaded schema keeps | {:.1} MiB |",
        after.saturating_sub(before) as f64 / 1024.0
    );
    let lookups = 10_000;
    let started = Instant::now();
    for _ in 0..lookups {
        std::hint::black_box(schema.description(
            "apps/v1/Deployment",
            "spec.template.spec.containers.*.image",
        ));
    }
    println!(
        "| a description looked up, once loaded | {:.2} µs |",
        started.elapsed().as_secs_f64() * 1e6 / f64::from(lookups)
    );

    let runner = beside_this("krm-runner")?;
    let dir = std::env::temp_dir().join(format!("krm-runner-bench-schema-{pid}"));
    std::fs::create_dir_all(&dir)?;
    let unit = dir.join("unit.yaml");
    std::fs::write(&unit, deployments(10))?;
    let unit = unit.to_str().context("a UTF-8 temporary path")?;
    let items = indent_items(&deployments(10));
    let starlark = |source: &str| {
        format!(
            "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n{items}functionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: prog\n  source: |\n    {source}\n"
        )
    };
    let pairs: [(Run, Run); 2] = [
        (
            (
                "`do` validate (loads it)",
                vec!["do", unit, "u", "validate"],
                Vec::new(),
            ),
            (
                "`do` no-placeholders (does not)",
                vec!["do", unit, "u", "no-placeholders"],
                Vec::new(),
            ),
        ),
        (
            (
                "`fn starlark` reading ctx.open_api",
                vec!["fn", "starlark"],
                starlark("x = ctx.open_api[\"definitions\"][\"io.k8s.api.apps.v1.Deployment\"]")
                    .into_bytes(),
            ),
            (
                "`fn starlark` not reading it",
                vec!["fn", "starlark"],
                starlark("x = ctx.resource_list[\"kind\"]").into_bytes(),
            ),
        ),
    ];
    println!("\n| whole process ({runs} runs each, alternating) | p50 | peak RSS |\n|---|---|---|");
    for ((with_label, with_args, with_input), (without_label, without_args, without_input)) in pairs
    {
        let mut with = Vec::with_capacity(runs);
        let mut without = Vec::with_capacity(runs);
        let (mut with_peak, mut without_peak) = (0, 0);
        for _ in 0..runs {
            let (time, peak) = timed(&runner, &with_args, &with_input)?;
            with.push(time);
            with_peak = with_peak.max(peak);
            let (time, peak) = timed(&runner, &without_args, &without_input)?;
            without.push(time);
            without_peak = without_peak.max(peak);
        }
        for (label, samples, peak) in [
            (with_label, &mut with, with_peak),
            (without_label, &mut without, without_peak),
        ] {
            println!(
                "| {label} | {} | {:.1} MiB |",
                ms(percentiles(samples).0),
                peak as f64 / 1024.0
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// A process to time: its label, arguments and standard input.
type Run<'a> = (&'a str, Vec<&'a str>, Vec<u8>);

/// One `krm-runner` process: its wall time and peak resident memory (KiB).
fn timed(runner: &std::path::Path, args: &[&str], input: &[u8]) -> anyhow::Result<(Duration, i64)> {
    let started = Instant::now();
    let mut child = Command::new(runner)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {}", runner.display()))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    // Small inputs: written whole before the child reads, within the pipe's buffer.
    stdin.write_all(input)?;
    drop(stdin);
    let pid = i32::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unwaited child; status and usage point at live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = started.elapsed();
    if waited != pid {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let status = std::process::ExitStatus::from_raw(status);
    // A validating function that fails exits 1 with its verdict; anything else is a fault.
    if status.code().is_none_or(|code| code > 1) {
        bail!("krm-runner {} ended with {status}", args.join(" "));
    }
    Ok((elapsed, usage.ru_maxrss))
}
