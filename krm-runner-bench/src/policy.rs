//! `--only policy`: what the trust policy adds to a call's admission (`Runtime::admit`, the
//! decision every call passes before routing), side by side with the same runtime without a
//! policy: glob rules alone, and a rule requiring a cosign signature, whose first sight of a
//! digest asks the registry and verifies, and whose later calls find the digest remembered.

use std::time::{Duration, Instant};

use krm_kube_standin::cosign::{self, Key};
use krm_kube_standin::registry::{self, LocalRegistry};
use krm_plugin_loader::HostCallContext;
use krm_runner::{Config, Purpose, Runtime};

use super::{BenchArgs, echo_config, percentiles};

pub async fn run(base: &Config, args: &BenchArgs) -> anyhow::Result<()> {
    globs(base, args.calls.max(100) * 10).await?;
    first_sight(base, (args.calls / 10).clamp(20, 500)).await
}

fn start(config: &Config) -> anyhow::Result<Runtime> {
    Runtime::start(config, Purpose::Serve)
        .map_err(|problems| anyhow::anyhow!("policy bench: {}", problems.join("; ")))
}

fn micros(duration: Duration) -> String {
    format!("{:.2} µs", duration.as_secs_f64() * 1e6)
}

/// The trust policy's decision per call: `Runtime::admit` for an image the last of 20 glob
/// rules allows, against a runtime without a policy, alternating.
async fn globs(base: &Config, calls: usize) -> anyhow::Result<()> {
    let open = start(&echo_config(base))?;
    let mut config = echo_config(base);
    let mut rules: Vec<serde_json::Value> = (0..19)
        .map(|i| {
            serde_json::json!({
                "name": format!("team-{i}"),
                "images": [format!("registry.example.com/team-{i}/**")],
                "tags": ">= 1, < 3",
                "action": "allow",
            })
        })
        .collect();
    rules.push(serde_json::json!({
        "name": "catalog",
        "images": ["ghcr.io/kptdev/krm-functions-catalog/*"],
        "tags": ">= 0.2, < 1",
        "action": "allow",
    }));
    config.policy = serde_json::from_value(serde_json::json!({"default": "deny", "rules": rules}))?;
    let guarded = start(&config)?;
    let image = "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1";
    let context = HostCallContext::new(None);
    let mut samples = [Vec::with_capacity(calls), Vec::with_capacity(calls)];
    for round in 0..calls * 2 {
        let (runtime, samples) = match round % 2 {
            0 => (&open, &mut samples[0]),
            _ => (&guarded, &mut samples[1]),
        };
        let started = Instant::now();
        let admitted = runtime.admit(&context, image).await;
        let elapsed = started.elapsed();
        std::hint::black_box(admitted).map_err(|refused| anyhow::anyhow!("{refused}"))?;
        samples.push(elapsed);
    }
    let [open, guarded] = samples.map(|mut samples| percentiles(&mut samples));
    println!("\n## Trust policy decision ({calls} calls each, alternating)");
    println!("| runtime | p50 | p99 |\n|---|---|---|");
    for (label, (p50, p99)) in [
        ("no policy", open),
        ("20 glob rules, the last matching", guarded),
    ] {
        println!("| {label} | {} | {} |", micros(p50), micros(p99));
    }
    println!(
        "| added at p50 | {} | |",
        micros(guarded.0.saturating_sub(open.0))
    );
    Ok(())
}

/// A rule requiring a P-256 cosign signature, the images and signatures in a local
/// docker-registry on loopback: for each of `images` signed images, by digest, the call without
/// a policy, the first call (the signature manifest and payload fetched, the signature
/// verified), the next call (the digest remembered) and the same image named by its tag (the
/// tag's digest asked of the registry, the signature remembered).
async fn first_sight(base: &Config, images: usize) -> anyhow::Result<()> {
    println!(
        "\n## Trust policy: a signature's first sight ({images} signed images, one call of each kind per image, interleaved)"
    );
    if let Err(missing) = registry::available() {
        println!("skipped: {missing}; Debian's docker-registry serves the images and signatures");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let key = Key::p256(7);
    // Pushing is blocking HTTP; nothing else runs meanwhile.
    let (registry, digests) = tokio::task::block_in_place(|| {
        let registry = LocalRegistry::start(&dir.path().join("registry"))?;
        let mut digests = Vec::with_capacity(images + 1);
        for image in 0..=images {
            let repository = format!("bench/fn-{image}");
            let digest = registry.push_image(&repository, "v1", &format!("function {image}"))?;
            cosign::sign(&registry, &repository, &digest, &key)?;
            digests.push(digest);
        }
        anyhow::Ok((registry, digests))
    })?;
    let host = &registry.host;
    let key_file = dir.path().join("release.pub");
    std::fs::write(&key_file, key.public_pem())?;
    let open = start(&echo_config(base))?;
    let mut config = echo_config(base);
    config.policy = serde_json::from_value(serde_json::json!({
        "default": "deny",
        "keys": {"release": key_file},
        "registries": {"plain_http": [host]},
        "rules": [{
            "name": "signed",
            "images": [format!("{host}/bench/*")],
            "action": "allow",
            "signed_by": ["release"],
        }],
    }))?;
    let guarded = start(&config)?;
    let context = HostCallContext::new(None);
    let admit = async |runtime: &Runtime, image: &str, reason: &str| {
        let started = Instant::now();
        let admitted = runtime.admit(&context, image).await;
        let elapsed = started.elapsed();
        let admitted = admitted.map_err(|refused| anyhow::anyhow!("{refused}"))?;
        anyhow::ensure!(
            admitted.decision.reason.contains(reason),
            "{image}: {} ({reason:?} expected)",
            admitted.decision
        );
        anyhow::Ok(elapsed)
    };
    // Image 0 warms the registry client and its connection up.
    let (warm_up, _) = image_names(host, 0, &digests[0]);
    admit(&guarded, &warm_up, "signed by release").await?;
    let signature_requests = registry.requests(".sig");
    let mut samples: [Vec<Duration>; 4] = Default::default();
    for (image, digest) in digests.iter().enumerate().skip(1) {
        let (by_digest, by_tag) = image_names(host, image, digest);
        samples[0].push(admit(&open, &by_digest, "no policy").await?);
        samples[1].push(admit(&guarded, &by_digest, "signed by release").await?);
        samples[2].push(admit(&guarded, &by_digest, "verified before").await?);
        samples[3].push(admit(&guarded, &by_tag, "verified before").await?);
    }
    let verified = registry.requests(".sig") - signature_requests;
    anyhow::ensure!(
        verified == images,
        "{verified} signature manifests fetched for {images} images"
    );
    let [open, first, remembered, by_tag] = samples.map(|mut samples| percentiles(&mut samples));
    println!("| call | p50 | p99 |\n|---|---|---|");
    for (label, (p50, p99)) in [
        ("no policy, by digest", open),
        (
            "signed_by, first sight of the digest (signature fetched and verified)",
            first,
        ),
        ("signed_by, the digest remembered", remembered),
        (
            "signed_by, by tag, the digest remembered (the tag's digest asked)",
            by_tag,
        ),
    ] {
        println!("| {label} | {} | {} |", micros(p50), micros(p99));
    }
    println!(
        "| first sight added at p50 | {} | |",
        micros(first.0.saturating_sub(open.0))
    );
    println!("({verified} signature manifests fetched: one per image)");
    Ok(())
}

/// `host/bench/fn-N@digest` and `host/bench/fn-N:v1`.
fn image_names(host: &str, image: usize, digest: &str) -> (String, String) {
    (
        format!("{host}/bench/fn-{image}@{digest}"),
        format!("{host}/bench/fn-{image}:v1"),
    )
}
