//! Small helpers: RFC 3339 time stamps, random names and uids, JSON path access.

use serde_json::{Map, Value};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, now.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `2006-01-02T15:04:05Z` for the current time.
pub fn now_rfc3339() -> String {
    format_rfc3339(now_secs())
}

/// Formats Unix seconds as RFC 3339 in UTC (`YYYY-MM-DDTHH:MM:SSZ`), as Kubernetes does.
pub fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Parses the RFC 3339 form Kubernetes writes (fractions and offsets tolerated).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // days_from_civil
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Random suffix for `generateName`, from the alphabet Kubernetes uses.
pub fn random_suffix(n: usize) -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::with_capacity(n);
    let mut r = random_u64();
    for i in 0..n {
        if i % 10 == 9 {
            r = random_u64();
        }
        out.push(ALPHA[(r % ALPHA.len() as u64) as usize] as char);
        r /= ALPHA.len() as u64;
    }
    out
}

/// A random version-4-shaped UUID.
pub fn new_uid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// `obj.metadata` as a mutable map, created when missing.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let m = obj.as_object_mut().expect("object");
    let meta = m
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("object")
}

/// A string at `metadata.<key>`.
pub fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(key)?.as_str()
}

/// The value at a dotted path (`status.phase`).
pub fn path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in dotted.split('.') {
        cur = cur.get(part)?;
    }
    Some(cur)
}

/// The string at a dotted path, or `""`.
pub fn path_str<'a>(obj: &'a Value, dotted: &str) -> &'a str {
    path(obj, dotted).and_then(Value::as_str).unwrap_or("")
}

/// Sets a value at a dotted path, creating objects on the way.
pub fn set_path(obj: &mut Value, dotted: &str, v: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = dotted.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let m = cur.as_object_mut().expect("object");
        if i + 1 == parts.len() {
            m.insert((*part).to_string(), v);
            return;
        }
        cur = m
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Holds a loopback address for as long as the returned file lives: an `flock` on
/// `/tmp/krm-kube-standin-ips/<addr>.lock` (a fixed path, whatever `TMPDIR` says; override with
/// `KRM_KUBE_STANDIN_LOCK_DIR`), exclusive across threads and processes, so two stand-ins never
/// hand out the same pod IP or cluster IP at the same time.
pub fn lock_address(addr: std::net::Ipv4Addr) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    if !addr.is_loopback() {
        return None;
    }
    let dir = std::env::var_os("KRM_KUBE_STANDIN_LOCK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/tmp/krm-kube-standin-ips"));
    std::fs::create_dir_all(&dir).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{addr}.lock")))
        .ok()?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    (r == 0).then_some(f)
}

/// Human age as kubectl prints it (`45s`, `3m2s`, `5h`, `2d`).
pub fn human_age(created: &str) -> String {
    let Some(t) = parse_rfc3339(created) else {
        return "<unknown>".into();
    };
    let s = (now_secs() - t).max(0);
    if s < 120 {
        format!("{s}s")
    } else if s < 600 {
        format!("{}m{}s", s / 60, s % 60)
    } else if s < 3 * 3600 {
        format!("{}m", s / 60)
    } else if s < 48 * 3600 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        for s in [0i64, 951_782_400, 1_700_000_000, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&format_rfc3339(s)), Some(s));
        }
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn uids_and_suffixes_look_right() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_ne!(u, new_uid());
        let s = random_suffix(5);
        assert_eq!(s.len(), 5);
    }
}
