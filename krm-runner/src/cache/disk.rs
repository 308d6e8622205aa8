//! The result cache's store on disk (`cache.disk`): answers kept across restarts, behind the
//! memory store.
//!
//! One file per answer, named by its key, written aside and renamed into place so that a
//! reader sees a whole entry or none. Each file starts with a header carrying the magic, the
//! key, the expiry (wall clock, since it must hold across restarts), the payload's length and a
//! SHA-256 over the header's fields and the payload; a file whose header, length or checksum
//! does not hold (truncated, edited by hand, another key's) is removed and never served. The
//! folder must be private to the runner's user (as the wasm evaluator's compiled modules'):
//! its files are answers given to callers as a function's.
//!
//! Everything here blocks: the cache calls it on tokio's blocking threads.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use krm_plugin_api::EvalResponse;
use krm_runner_function_config::private_folder::{hex, private_folder};
use sha2::{Digest, Sha256};

use super::{Answer, Key};
use crate::config::DiskCacheConfig;

/// The first bytes of every entry; the last one is the format's version.
const MAGIC: &[u8; 8] = b"KRMCACH\x01";

/// Magic, key, expiry, length, checksum.
const HEADER_BYTES: u64 = 8 + 32 + 8 + 8 + 32;

/// The ending of an entry's file name, after the key in hexadecimal.
const ENTRY_SUFFIX: &str = ".entry";

/// What a look-up on disk found.
pub(super) enum Loaded {
    Absent,
    /// A whole entry, not expired: its answer, kept in memory for the time it has left.
    Found(Answer),
    /// An entry past its expiry: removed.
    Expired,
    /// An entry that is not whole or not ours (truncated, edited, another key's): removed.
    Corrupt,
}

/// The store on disk.
pub(super) struct DiskStore {
    dir: PathBuf,
    max_bytes: u64,
    /// The largest payload read or written: bounds every read.
    largest: u64,
    index: Mutex<Index>,
    /// Set by the first write that fails (a full or read-only folder): from then on answers
    /// are only read from disk, and the failure was warned of once.
    unwritable: AtomicBool,
}

/// The entries on disk by age, to remove the oldest when over the bound.
#[derive(Default)]
struct Index {
    bytes: u64,
    by_age: BTreeMap<(SystemTime, Key), u64>,
    by_key: HashMap<Key, SystemTime>,
}

impl Index {
    fn add(&mut self, key: Key, written: SystemTime, bytes: u64) {
        self.remove(&key);
        self.by_age.insert((written, key), bytes);
        self.by_key.insert(key, written);
        self.bytes += bytes;
    }

    fn remove(&mut self, key: &Key) {
        if let Some(written) = self.by_key.remove(key)
            && let Some(bytes) = self.by_age.remove(&(written, *key))
        {
            self.bytes -= bytes;
        }
    }

    /// Takes the oldest entries out until the rest fit in `max_bytes`; their keys.
    fn over(&mut self, max_bytes: u64) -> Vec<Key> {
        let mut removed = Vec::new();
        while self.bytes > max_bytes {
            let Some(((written, key), bytes)) = self.by_age.pop_first() else {
                break;
            };
            debug_assert_eq!(self.by_key.get(&key), Some(&written));
            self.by_key.remove(&key);
            self.bytes -= bytes;
            removed.push(key);
        }
        removed
    }
}

/// One entry found in the folder, for the index and `krm-runner cache`.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub key: Key,
    pub written: SystemTime,
    pub bytes: u64,
}

/// What a disk store holds, for `krm-runner cache`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiskUsage {
    pub path: PathBuf,
    pub entries: u64,
    pub bytes: u64,
    /// The bound, when a running store tells it.
    pub max_bytes: Option<u64>,
    /// When the oldest and the newest entry were written, in seconds since the Unix epoch.
    pub oldest: Option<u64>,
    pub newest: Option<u64>,
}

impl DiskUsage {
    /// The usage of `entries`, listed in `path`.
    pub fn of(path: &Path, entries: &[Entry], max_bytes: Option<u64>) -> Self {
        let seconds = |time: SystemTime| {
            time.duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs())
        };
        Self {
            path: path.to_owned(),
            entries: entries.len() as u64,
            bytes: entries.iter().map(|entry| entry.bytes).sum(),
            max_bytes,
            oldest: entries.iter().map(|entry| entry.written).min().map(seconds),
            newest: entries.iter().map(|entry| entry.written).max().map(seconds),
        }
    }
}

/// The entries in `dir`: the files named as entries are; anything else is not looked at.
pub fn entries(dir: &Path) -> std::io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let Some(key) = item.file_name().to_str().and_then(key_of_file) else {
            continue;
        };
        let metadata = match item.metadata() {
            Ok(metadata) if metadata.is_file() => metadata,
            // Removed since the listing, or not a file.
            _ => continue,
        };
        entries.push(Entry {
            key,
            written: metadata.modified()?,
            bytes: metadata.len(),
        });
    }
    Ok(entries)
}

/// Removes every entry in `dir`; how many were removed.
pub fn clear(dir: &Path) -> std::io::Result<usize> {
    let listed = entries(dir)?;
    for entry in &listed {
        match std::fs::remove_file(entry_path(dir, &entry.key)) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    Ok(listed.len())
}

fn key_of_file(name: &str) -> Option<Key> {
    let hex = name.strip_suffix(ENTRY_SUFFIX)?;
    if hex.len() != 64 {
        return None;
    }
    let mut key = [0; 32];
    for (byte, pair) in key.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}

fn entry_path(dir: &Path, key: &Key) -> PathBuf {
    dir.join(format!("{}{ENTRY_SUFFIX}", hex(key)))
}

impl DiskStore {
    /// The store `config` describes, its entries indexed (and the oldest removed when they
    /// are over the bound); `None`, warned of, when the folder cannot be trusted or read.
    /// No payload larger than `largest` is read or written.
    pub(super) fn open(config: &DiskCacheConfig, largest: u64) -> Option<Self> {
        let dir = config.path.clone();
        let listed = private_folder(&dir)
            .map_err(|problem| problem.to_string())
            .and_then(|()| {
                entries(&dir)
                    .map_err(|error| format!("cannot list folder {}: {error}", dir.display()))
            });
        let listed = match listed {
            Ok(listed) => listed,
            Err(problem) => {
                tracing::warn!("cache.disk.path: {problem}; answers are kept in memory only");
                return None;
            }
        };
        let mut index = Index::default();
        for entry in listed {
            index.add(entry.key, entry.written, entry.bytes);
        }
        let store = Self {
            dir,
            max_bytes: config.max_bytes,
            largest,
            index: Mutex::new(Index::default()),
            unwritable: AtomicBool::new(false),
        };
        let over = index.over(store.max_bytes);
        *store.index() = index;
        store.remove_files(&over);
        Some(store)
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry of `key`, when one is on disk, whole and not expired; one that is not whole
    /// or expired is removed.
    pub(super) fn load(&self, key: &Key) -> Loaded {
        let path = entry_path(&self.dir, key);
        let bytes = match self.read_bounded(&path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Loaded::Absent,
            Err(problem) => {
                tracing::warn!(file = %path.display(), "cached answer discarded: {problem}");
                self.discard(key);
                return Loaded::Corrupt;
            }
        };
        match decode(key, &bytes) {
            Ok((expires, stored)) => match expires.duration_since(SystemTime::now()) {
                Ok(left) if !left.is_zero() => Loaded::Found(stored.into_answer(left)),
                _ => {
                    self.discard(key);
                    Loaded::Expired
                }
            },
            Err(problem) => {
                tracing::warn!(file = %path.display(), "cached answer discarded: {problem}");
                self.discard(key);
                Loaded::Corrupt
            }
        }
    }

    /// The file's bytes, at most a header and the largest payload; `None` when there is none.
    fn read_bounded(&self, path: &Path) -> Result<Option<Vec<u8>>, String> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read it: {error}")),
        };
        let limit = HEADER_BYTES + self.largest;
        let mut bytes = Vec::new();
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|error| format!("cannot read it: {error}"))?;
        if bytes.len() as u64 > limit {
            return Err(format!("larger than {limit} bytes"));
        }
        Ok(Some(bytes))
    }

    /// Keeps `answer` under `key` until `expires`, then removes the oldest entries over the
    /// bound. A write that fails turns writing off, with one warning.
    pub(super) fn store(&self, key: &Key, answer: &Answer, expires: SystemTime) {
        if self.unwritable.load(Ordering::Relaxed) {
            return;
        }
        let bytes = encode(key, answer, expires);
        if bytes.len() as u64 > HEADER_BYTES + self.largest {
            return;
        }
        let path = entry_path(&self.dir, key);
        if let Err(error) = write_whole(&self.dir, &path, &bytes) {
            if !self.unwritable.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    folder = %self.dir.display(),
                    "cache.disk.path: cannot write a cached answer ({error}); answers are \
                     kept in memory only until the runner restarts"
                );
            }
            return;
        }
        let over = {
            let mut index = self.index();
            index.add(*key, SystemTime::now(), bytes.len() as u64);
            index.over(self.max_bytes)
        };
        self.remove_files(&over);
    }

    fn discard(&self, key: &Key) {
        self.index().remove(key);
        self.remove_files(&[*key]);
    }

    fn remove_files(&self, keys: &[Key]) {
        for key in keys {
            let path = entry_path(&self.dir, key);
            if let Err(error) = std::fs::remove_file(&path)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::debug!(file = %path.display(), %error, "cannot remove a cached answer");
            }
        }
    }

    /// What the store holds, as its index counts it.
    pub(super) fn usage(&self) -> DiskUsage {
        let listed: Vec<Entry> = self
            .index()
            .by_age
            .iter()
            .map(|(&(written, key), &bytes)| Entry {
                key,
                written,
                bytes,
            })
            .collect();
        DiskUsage::of(&self.dir, &listed, Some(self.max_bytes))
    }

    /// Removes every entry in the folder.
    pub(super) fn clear(&self) {
        *self.index() = Index::default();
        if let Err(error) = clear(&self.dir) {
            tracing::warn!(folder = %self.dir.display(), %error, "cannot clear the cached answers");
        }
    }
}

/// Writes `bytes` to `path`, whole or not at all. Not synced: an entry a crash leaves torn
/// fails its checksum and is discarded, which costs a run, not a wrong answer.
fn write_whole(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// An answer as stored: what a hit gives back.
struct Stored {
    response: EvalResponse,
    resolved: Option<String>,
    image: String,
}

impl Stored {
    fn into_answer(self, ttl: Duration) -> Answer {
        Answer {
            response: self.response,
            resolved: self.resolved,
            image: self.image,
            ttl,
        }
    }
}

fn encode(key: &Key, answer: &Answer, expires: SystemTime) -> Vec<u8> {
    let mut payload = Vec::with_capacity(answer.weight() as usize);
    let response = &answer.response;
    put(&mut payload, &response.resource_list);
    put(&mut payload, &response.log);
    put_optional(&mut payload, response.served_by.as_deref());
    payload.extend_from_slice(&(response.declined.len() as u64).to_le_bytes());
    for declined in &response.declined {
        put(&mut payload, declined.as_bytes());
    }
    put_optional(&mut payload, answer.resolved.as_deref());
    put(&mut payload, answer.image.as_bytes());
    let expires = expires
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let mut bytes = Vec::with_capacity(HEADER_BYTES as usize + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(&expires.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let checksum = checksum(&bytes, &payload);
    bytes.extend_from_slice(&checksum);
    bytes.extend_from_slice(&payload);
    bytes
}

/// The SHA-256 over the header's fields before it and the payload.
fn checksum(fields: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(fields);
    hasher.update(payload);
    hasher.finalize().into()
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_optional(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => {
            out.push(1);
            put(out, text.as_bytes());
        }
        None => out.push(0),
    }
}

/// The expiry and answer of an entry read for `key`, or what is wrong with it.
fn decode(key: &Key, bytes: &[u8]) -> Result<(SystemTime, Stored), String> {
    let mut reader = Reader(bytes);
    if reader.take(MAGIC.len())? != MAGIC {
        return Err("not a cached answer of this runner's format".to_owned());
    }
    if reader.take(32)? != key {
        return Err("it holds another key's answer".to_owned());
    }
    let expires = reader.number()?;
    let length = reader.number()?;
    let fields = &bytes[..bytes.len() - reader.0.len()];
    let stored_checksum = reader.take(32)?;
    if reader.0.len() as u64 != length {
        return Err(format!(
            "its payload is {} bytes, its header says {length}",
            reader.0.len()
        ));
    }
    if checksum(fields, reader.0) != stored_checksum {
        return Err("its checksum does not match its content".to_owned());
    }
    let resource_list = reader.bytes()?.to_vec();
    let log = reader.bytes()?.to_vec();
    let served_by = reader.optional_text()?;
    let declined = (0..reader.number()?)
        .map(|_| reader.text())
        .collect::<Result<_, _>>()?;
    let resolved = reader.optional_text()?;
    let image = reader.text()?;
    if !reader.0.is_empty() {
        return Err("bytes after its answer".to_owned());
    }
    let stored = Stored {
        response: EvalResponse {
            resource_list,
            log,
            served_by,
            declined,
        },
        resolved,
        image,
    };
    Ok((UNIX_EPOCH + Duration::from_secs(expires), stored))
}

/// Reads an entry's fields, each bounded by what is left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        if count > self.0.len() {
            return Err("truncated".to_owned());
        }
        let (taken, rest) = self.0.split_at(count);
        self.0 = rest;
        Ok(taken)
    }

    fn number(&mut self) -> Result<u64, String> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(
            bytes.try_into().expect("take gives 8 bytes"),
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let length = self.number()?;
        self.take(usize::try_from(length).map_err(|_| "truncated".to_owned())?)
    }

    fn text(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "a name is not UTF-8".to_owned())
    }

    fn optional_text(&mut self) -> Result<Option<String>, String> {
        match self.take(1)? {
            [0] => Ok(None),
            [1] => self.text().map(Some),
            _ => Err("a malformed field".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> Answer {
        Answer {
            response: EvalResponse {
                resource_list: b"items: []\n".to_vec(),
                log: b"done".to_vec(),
                served_by: Some("builtin".to_owned()),
                declined: vec!["exec".to_owned(), "wasm".to_owned()],
            },
            resolved: None,
            image: "set-namespace".to_owned(),
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn an_entry_reads_back_and_any_changed_byte_is_refused() {
        let key = [7; 32];
        let expires = UNIX_EPOCH + Duration::from_secs(4_000_000_000);
        let bytes = encode(&key, &answer(), expires);
        let (read_expires, stored) = decode(&key, &bytes).unwrap();
        assert_eq!(read_expires, expires);
        assert_eq!(stored.response, answer().response);
        assert_eq!(stored.image, "set-namespace");
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 1;
            assert!(decode(&key, &changed).is_err(), "byte {at} changed");
        }
        for length in 0..bytes.len() {
            assert!(decode(&key, &bytes[..length]).is_err(), "cut at {length}");
        }
        assert!(decode(&[8; 32], &bytes).is_err());
    }

    fn store_in(dir: &Path, max_bytes: u64) -> DiskStore {
        let config = DiskCacheConfig {
            path: dir.to_owned(),
            max_bytes,
        };
        DiskStore::open(&config, 1 << 20).expect("a private folder")
    }

    #[test]
    fn a_store_keeps_answers_across_openings_and_discards_what_it_cannot_trust() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("cache");
        let later = SystemTime::now() + Duration::from_secs(600);
        let store = store_in(&dir, 1 << 20);
        for key in [[1; 32], [2; 32], [3; 32]] {
            store.store(&key, &answer(), later);
        }
        store.store(&[4; 32], &answer(), SystemTime::now());
        drop(store);

        let store = store_in(&dir, 1 << 20);
        assert_eq!(store.usage().entries, 4);
        let Loaded::Found(found) = store.load(&[1; 32]) else {
            panic!("the entry was not found again");
        };
        assert_eq!(found.response, answer().response);
        assert!(found.ttl <= Duration::from_secs(600));
        assert!(matches!(store.load(&[4; 32]), Loaded::Expired));
        std::fs::write(entry_path(&dir, &[2; 32]), b"not an entry").unwrap();
        assert!(matches!(store.load(&[2; 32]), Loaded::Corrupt));
        assert!(
            !entry_path(&dir, &[2; 32]).exists(),
            "a corrupt entry stays"
        );
        assert!(matches!(store.load(&[9; 32]), Loaded::Absent));
        assert_eq!(store.usage().entries, 2);
        store.clear();
        assert!(entries(&dir).unwrap().is_empty());
    }

    #[test]
    fn the_oldest_entries_go_first_when_over_the_bound() {
        let mut index = Index::default();
        let start = UNIX_EPOCH + Duration::from_secs(1000);
        for (age, key) in [(2, 1), (0, 2), (1, 3)] {
            index.add([key; 32], start + Duration::from_secs(age), 100);
        }
        assert_eq!(index.over(150), vec![[2; 32], [3; 32]]);
        assert_eq!(index.bytes, 100);
        index.add([1; 32], start, 40);
        assert_eq!(index.bytes, 40, "a replaced entry counts once");
    }
}
