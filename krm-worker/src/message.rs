//! The frames between the runner and a worker: a kind, a JSON header and up to
//! [`MAX_PARTS`] byte parts, each length-prefixed and each bounded before it is read.

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Parts a message may carry (a ResourceList and a log, a request and its response).
pub const MAX_PARTS: usize = 4;
/// The largest header: a header holds names, settings and bounded messages, never data.
pub const MAX_HEADER_BYTES: usize = 1 << 20;

/// What a frame is, as its first byte says.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Runner to worker, first: the worker's role and its settings.
    Init = 1,
    /// Worker to runner: the role started (or why it could not).
    Ready = 2,
    /// Runner to worker: one call.
    Call = 3,
    /// Worker to runner: the call's answer.
    Answer = 4,
    /// Worker to runner, during a call: a question only the runner can answer (a typed function
    /// of a plugin loaded in the runner).
    Callback = 5,
    /// Runner to worker: the answer to a [`Kind::Callback`].
    CallbackAnswer = 6,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Init,
            2 => Self::Ready,
            3 => Self::Call,
            4 => Self::Answer,
            5 => Self::Callback,
            6 => Self::CallbackAnswer,
            _ => return None,
        })
    }
}

/// A JSON header, whose shape the role defines, and byte parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// JSON text.
    pub header: Vec<u8>,
    pub parts: Vec<Vec<u8>>,
}

/// Why a message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// The other side closed the pipe: a worker that died, or a runner that went away.
    #[error("the other side closed the channel")]
    Closed,
    #[error("reading or writing the channel: {0}")]
    Io(#[from] io::Error),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A frame announced more than the limits allow; nothing of it was read.
    #[error("{what} of {size} bytes is over the limit of {limit}")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("the header is not the JSON expected: {0}")]
    Header(#[source] serde_json::Error),
}

impl Message {
    /// A message whose header is `header` as JSON.
    pub fn new(header: &impl Serialize, parts: Vec<Vec<u8>>) -> Self {
        Self {
            // Serializing a plain data type to a Vec cannot fail.
            header: serde_json::to_vec(header).unwrap_or_default(),
            parts,
        }
    }

    /// The header read as `T`.
    pub fn header<T: DeserializeOwned>(&self) -> Result<T, MessageError> {
        serde_json::from_slice(&self.header).map_err(MessageError::Header)
    }

    /// Part `index`, taken out of the message (empty when there is none).
    pub fn take_part(&mut self, index: usize) -> Vec<u8> {
        self.parts
            .get_mut(index)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The bytes of every part together.
    pub fn data_bytes(&self) -> usize {
        self.parts.iter().map(Vec::len).sum()
    }

    /// Writes the message as one frame.
    pub fn write(&self, kind: Kind, out: &mut impl Write) -> Result<(), MessageError> {
        let parts = self.parts.len().min(MAX_PARTS);
        let mut prefix = Vec::with_capacity(6 + 8 * parts);
        prefix.push(kind as u8);
        prefix.push(parts as u8);
        prefix.extend_from_slice(&(self.header.len() as u32).to_le_bytes());
        for part in &self.parts[..parts] {
            prefix.extend_from_slice(&(part.len() as u64).to_le_bytes());
        }
        out.write_all(&prefix).map_err(closed_or_io)?;
        out.write_all(&self.header).map_err(closed_or_io)?;
        for part in &self.parts[..parts] {
            out.write_all(part).map_err(closed_or_io)?;
        }
        out.flush().map_err(closed_or_io)
    }

    /// Reads one frame; each part may hold at most `part_limit` bytes, checked before any of
    /// it is read.
    pub fn read(input: &mut impl Read, part_limit: usize) -> Result<(Kind, Self), MessageError> {
        let mut fixed = [0u8; 6];
        input.read_exact(&mut fixed).map_err(closed_or_io)?;
        let kind = Kind::from_byte(fixed[0]).ok_or(MessageError::UnknownKind(fixed[0]))?;
        let parts = usize::from(fixed[1]);
        if parts > MAX_PARTS {
            return Err(MessageError::TooLarge {
                what: "a frame's part count",
                size: parts as u64,
                limit: MAX_PARTS as u64,
            });
        }
        let header_len = u32::from_le_bytes([fixed[2], fixed[3], fixed[4], fixed[5]]);
        bounded("a header", u64::from(header_len), MAX_HEADER_BYTES)?;
        let mut lengths = Vec::with_capacity(parts);
        for _ in 0..parts {
            let mut length = [0u8; 8];
            input.read_exact(&mut length).map_err(closed_or_io)?;
            let length = u64::from_le_bytes(length);
            bounded("a part", length, part_limit)?;
            lengths.push(length as usize);
        }
        let mut header = vec![0u8; header_len as usize];
        input.read_exact(&mut header).map_err(closed_or_io)?;
        let mut read_parts = Vec::with_capacity(parts);
        for length in lengths {
            let mut part = vec![0u8; length];
            input.read_exact(&mut part).map_err(closed_or_io)?;
            read_parts.push(part);
        }
        Ok((
            kind,
            Self {
                header,
                parts: read_parts,
            },
        ))
    }
}

fn bounded(what: &'static str, size: u64, limit: usize) -> Result<(), MessageError> {
    if size > limit as u64 {
        return Err(MessageError::TooLarge {
            what,
            size,
            limit: limit as u64,
        });
    }
    Ok(())
}

fn closed_or_io(error: io::Error) -> MessageError {
    match error.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe => MessageError::Closed,
        _ => MessageError::Io(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_back_as_written() {
        let message = Message::new(
            &serde_json::json!({"image": "x"}),
            vec![b"rl".to_vec(), vec![]],
        );
        let mut wire = Vec::new();
        message.write(Kind::Call, &mut wire).unwrap();
        let (kind, read) = Message::read(&mut wire.as_slice(), 16).unwrap();
        assert_eq!(kind, Kind::Call);
        assert_eq!(read, message);
    }

    #[test]
    fn a_part_over_the_limit_is_refused_before_it_is_read() {
        let message = Message::new(&(), vec![vec![0; 17]]);
        let mut wire = Vec::new();
        message.write(Kind::Answer, &mut wire).unwrap();
        // Cut the frame after its lengths: a reader that allocated or read the part would
        // report the end of input instead.
        wire.truncate(6 + 8);
        match Message::read(&mut wire.as_slice(), 16) {
            Err(MessageError::TooLarge {
                size: 17,
                limit: 16,
                ..
            }) => {}
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn an_unknown_kind_and_a_cut_frame_are_errors() {
        assert!(matches!(
            Message::read(&mut [9u8, 0, 0, 0, 0, 0].as_slice(), 16),
            Err(MessageError::UnknownKind(9))
        ));
        assert!(matches!(
            Message::read(&mut [3u8, 0, 5, 0].as_slice(), 16),
            Err(MessageError::Closed)
        ));
    }
}
