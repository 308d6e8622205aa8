//! The worker's side: take the role, then answer calls one at a time until the runner closes
//! the channel (or dies: the worker then dies with it, by `PR_SET_PDEATHSIG`).

use std::fs::File;
use std::io::{self, BufReader, BufWriter};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::message::{Kind, MAX_HEADER_BYTES, Message, MessageError};

/// What a worker does with its calls.
pub trait Role {
    /// Answers one call. A failure is part of the answer, in the header the role defines: the
    /// worker itself only ends when the channel does.
    fn call(&mut self, request: Message) -> Message;
}

/// The worker's end of the pipes, shared with the role so that it can ask the runner during a
/// call ([`Channel::callback`]).
#[derive(Clone)]
pub struct Channel(Arc<Mutex<Pipes>>);

struct Pipes {
    input: BufReader<File>,
    output: BufWriter<File>,
    part_limit: usize,
}

impl Channel {
    /// Asks the runner `question` and waits for its answer.
    pub fn callback(&self, question: &Message) -> Result<Message, MessageError> {
        let mut pipes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        question.write(Kind::Callback, &mut pipes.output)?;
        let part_limit = pipes.part_limit;
        match Message::read(&mut pipes.input, part_limit)? {
            (Kind::CallbackAnswer, answer) => Ok(answer),
            (kind, _) => Err(MessageError::UnknownKind(kind as u8)),
        }
    }

    fn receive(&self) -> Result<(Kind, Message), MessageError> {
        let mut pipes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let part_limit = pipes.part_limit;
        Message::read(&mut pipes.input, part_limit)
    }

    fn send(&self, kind: Kind, message: &Message) -> Result<(), MessageError> {
        let mut pipes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        message.write(kind, &mut pipes.output)
    }

    fn set_part_limit(&self, limit: usize) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .part_limit = limit;
    }
}

/// The `Init` header: the pool's settings for the worker, and the role's own.
#[derive(Serialize, Deserialize)]
pub(crate) struct InitHeader {
    pub(crate) cpu_seconds_per_call: u64,
    pub(crate) message_bytes: usize,
    pub(crate) role: serde_json::Value,
}

/// The `Ready` header: `None`, or why the role could not start.
#[derive(Serialize, Deserialize)]
pub(crate) struct ReadyHeader {
    pub(crate) error: Option<String>,
}

/// Calls at least this large leave big freed blocks in the allocator, handed back after them.
const LARGE_CALL_BYTES: usize = 1 << 20;

/// Runs this process as a worker: `start` makes the role from the role's `Init` header and
/// parts; then each call is answered by it. The process's exit status.
pub fn serve(
    start: impl FnOnce(serde_json::Value, Vec<Vec<u8>>, Channel) -> Result<Box<dyn Role>, String>,
) -> i32 {
    let channel = match take_standard_streams() {
        Ok(channel) => channel,
        Err(error) => {
            eprintln!("krm-runner worker: cannot set up its channel: {error}");
            return 1;
        }
    };
    let (init, role_parts) = match channel.receive() {
        Ok((Kind::Init, mut message)) => {
            let parts = std::mem::take(&mut message.parts);
            match message.header::<InitHeader>() {
                Ok(init) => (init, parts),
                Err(error) => return refuse(&channel, error.to_string()),
            }
        }
        Ok((kind, _)) => return refuse(&channel, format!("expected Init, got {kind:?}")),
        Err(error) => return refuse(&channel, error.to_string()),
    };
    channel.set_part_limit(init.message_bytes);
    let mut role = match start(init.role, role_parts, channel.clone()) {
        Ok(role) => role,
        Err(error) => return refuse(&channel, error),
    };
    if channel
        .send(
            Kind::Ready,
            &Message::new(&ReadyHeader { error: None }, Vec::new()),
        )
        .is_err()
    {
        return 1;
    }
    loop {
        let request = match channel.receive() {
            Ok((Kind::Call, request)) => request,
            Ok((kind, _)) => {
                eprintln!("krm-runner worker: expected a call, got {kind:?}");
                return 1;
            }
            Err(MessageError::Closed) => return 0,
            Err(error) => {
                eprintln!("krm-runner worker: {error}");
                return 1;
            }
        };
        if let Err(error) = limits::allow_cpu_seconds(init.cpu_seconds_per_call) {
            eprintln!("krm-runner worker: cannot set its CPU limit: {error}");
            return 1;
        }
        let large = request.data_bytes() >= LARGE_CALL_BYTES;
        let answer = role.call(request);
        let large = large || answer.data_bytes() >= LARGE_CALL_BYTES;
        if channel.send(Kind::Answer, &answer).is_err() {
            return 1;
        }
        drop(answer);
        if large {
            // SAFETY: malloc_trim only walks glibc's own heap structures.
            unsafe { libc::malloc_trim(0) };
        }
    }
}

fn refuse(channel: &Channel, error: String) -> i32 {
    let _ = channel.send(
        Kind::Ready,
        &Message::new(&ReadyHeader { error: Some(error) }, Vec::new()),
    );
    1
}

/// The channel is standard input and output as the pool set them up; they move to descriptors
/// of their own, standard input then reads nothing and standard output goes to the log, so
/// that nothing a role prints can corrupt a frame.
fn take_standard_streams() -> io::Result<Channel> {
    let input = duplicate(0)?;
    let output = duplicate(1)?;
    // SAFETY: the path is a NUL-terminated literal.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain syscalls on descriptors this process owns; 0 and 1 are replaced, not lost
    // (their duplicates above hold the pipes).
    unsafe {
        if libc::dup2(null, 0) < 0 || libc::dup2(2, 1) < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::close(null);
    }
    Ok(Channel(Arc::new(Mutex::new(Pipes {
        input: BufReader::with_capacity(64 * 1024, File::from(input)),
        output: BufWriter::with_capacity(64 * 1024, File::from(output)),
        part_limit: MAX_HEADER_BYTES,
    }))))
}

fn duplicate(fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain fcntl; the new descriptor is ours alone.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}
