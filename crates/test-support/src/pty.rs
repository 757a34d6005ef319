//! A process on a pseudo-terminal: its stdin and stderr are the terminal
//! (`isatty` is true there, as for a person at a shell), its stdout a
//! pipe. The test types lines on the terminal ([`PtyProcess::type_line`])
//! and reads what the process wrote to it ([`PtyProcess::screen`]), read
//! as it comes by a thread.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A process whose stdin and stderr are a pseudo-terminal (killed on
/// drop).
pub struct PtyProcess {
    child: Child,
    master: File,
    screen: Arc<Mutex<Vec<u8>>>,
    stdout: Option<JoinHandle<String>>,
    _reader: JoinHandle<()>,
}

/// A new pseudo-terminal: its master and slave ends, neither inherited by
/// children (the slave goes to a child only as the stdio it is given).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    // SAFETY: openpty writes the two descriptors it opens into the
    // pointers, which point at live locals; name, termios and window size
    // may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened by openpty and are owned
    // by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: fcntl on a descriptor this function owns.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok((master, slave))
}

impl PtyProcess {
    /// Starts `cmd` with its stdin and stderr on a new pseudo-terminal and
    /// its stdout piped.
    pub fn spawn(mut cmd: Command) -> std::io::Result<PtyProcess> {
        let (master, slave) = open_pty()?;
        cmd.stdin(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave))
            .stdout(Stdio::piped());
        let mut child = cmd.spawn()?;
        // The command holds the parent's copies of the slave end: dropped
        // here, so the master reads EIO once the child's copies close.
        drop(cmd);
        let stdout = child.stdout.take().map(|mut out| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = out.read_to_string(&mut s);
                s
            })
        });
        let master = File::from(master);
        let mut reading = master.try_clone()?;
        let screen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&screen);
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once every slave end is closed: the process ended.
            while let Ok(n) = reading.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().extend_from_slice(&buf[..n]);
            }
        });
        Ok(PtyProcess {
            child,
            master,
            screen,
            stdout,
            _reader: reader,
        })
    }

    /// Everything the process wrote to the terminal so far (with the
    /// terminal's echo of what was typed).
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock()).into_owned()
    }

    /// The raw bytes written to the terminal so far.
    pub fn screen_bytes(&self) -> Vec<u8> {
        self.screen.lock().clone()
    }

    /// Waits until the terminal shows `text` `times` times (panics after
    /// `limit`, showing the screen).
    pub fn wait_for(&self, text: &str, times: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.screen().matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "{text:?} not shown {times} time(s) within {limit:?}; the terminal shows:\n{}",
                self.screen()
            );
            std::thread::sleep(crate::wait::POLL);
        }
    }

    /// Types `line` and Enter on the terminal.
    pub fn type_line(&mut self, line: &str) {
        let typed = format!("{line}\n");
        if let Err(e) = self.master.write_all(typed.as_bytes()) {
            panic!("cannot type on the terminal: {e}");
        }
    }

    /// Waits for the process's end within `limit` (then kills it): its
    /// exit status and stdout.
    pub fn finish(mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "the process did not end within {limit:?}; the terminal shows:\n{}",
                    self.screen()
                );
            }
            std::thread::sleep(crate::wait::POLL);
        };
        let stdout = self
            .stdout
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        (status, stdout)
    }
}

impl Drop for PtyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
