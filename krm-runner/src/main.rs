//! `krm-runner`: runs `krm-runner fn ...` itself, and every other command line through
//! `krm-runner-server`, which replaces this process (see the library's documentation).
//!
//! Its entry point is C's `main`, not std's: before a Rust `main`, std asks glibc for the main
//! thread's stack bounds to print a message on stack overflow, and glibc finds them by reading
//! and parsing all of `/proc/self/maps`, a twentieth of a 10-object `fn` process. This entry
//! keeps the rest of what std's start does for a program like this one.

#![no_main]

use std::ffi::{OsString, c_char, c_int};

#[unsafe(no_mangle)]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    reopen_closed_standard_streams();
    // Writing to a closed pipe is then an error the call reports, not a silent death;
    // `std::process::Command` restores the default in the processes it starts.
    // SAFETY: no other thread exists yet, and ignoring a signal installs no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let status = std::panic::catch_unwind(|| {
        // glibc hands the arguments to std before `main`, whichever entry point runs.
        let args: Vec<OsString> = std::env::args_os().collect();
        match krm_runner::FunctionCall::parse(&args) {
            Some(call) => krm_runner::run_function(&call),
            None => krm_runner::exec_server(&args),
        }
    })
    // The panic has been reported; 101 is the status a panicking Rust `main` exits with.
    .unwrap_or(101);
    // `exit` flushes standard output's buffer first, as returning from a Rust `main` does.
    std::process::exit(c_int::from(status))
}

/// As std's start does: a standard stream the caller closed would otherwise take the number of
/// the next file this process opens, and what is written to the stream would go into that file.
fn reopen_closed_standard_streams() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // SAFETY: the path is a NUL-terminated literal; the lowest free descriptor, `fd`
            // itself, is the one this opens, which is why the streams are visited in order.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}
