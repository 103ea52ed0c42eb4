//! An HTTP/2 connection's first writes, sent together.
//!
//! An HTTP/2 server writes its SETTINGS as soon as the connection starts and acknowledges the
//! client's SETTINGS once it has read them: two TLS records and two socket writes, one after
//! the other, on every connection. Clients send their preface, SETTINGS and first request right
//! after the TLS handshake, so the client's SETTINGS are usually read already by the time the
//! server's are written. [`FirstFlight`] holds the server's first writes until
//!
//! - a flush after the connection has read something: what was held goes out with what that
//!   read caused (the acknowledgement, a window update) in one write. An HTTP/2 connection
//!   reads until a read would wait, then writes and flushes its answers, so a read that would
//!   wait after bytes were read gives the connection one more turn (its task is woken) before
//!   the held writes are sent anyway;
//! - a read would wait and nothing was read since the writes: they go out at once, as a
//!   client may wait for the server's SETTINGS before it sends anything more;
//! - a shutdown, or more than [`HOLD_LIMIT`] to hold.
//!
//! After that every write goes straight through. What a client receives, byte for byte, is
//! what it would receive without the hold; only the number of records and writes changes.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// More than this is never held: a server's SETTINGS and an acknowledgement are ~100 bytes.
const HOLD_LIMIT: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing written yet; reads and flushes go through.
    Before,
    /// The first writes are held; `read_since` once a read after them returned bytes,
    /// `waited` once a read after that would have waited.
    Holding { read_since: bool, waited: bool },
    /// Everything goes straight through.
    Through,
}

/// A stream that sends its first writes together (see the module's documentation).
#[derive(Debug)]
pub struct FirstFlight<S> {
    inner: S,
    phase: Phase,
    held: Vec<u8>,
}

impl<S> FirstFlight<S> {
    /// Holds the first writes of `inner` when `hold` (an HTTP/2 connection); passes everything
    /// straight through otherwise.
    pub fn new(inner: S, hold: bool) -> Self {
        FirstFlight { inner, phase: if hold { Phase::Before } else { Phase::Through }, held: Vec::new() }
    }
}

impl<S: AsyncWrite + Unpin> FirstFlight<S> {
    /// Writes out what is held, then lets everything through.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        self.phase = Phase::Through;
        Poll::Ready(Ok(()))
    }

    /// Whether `bufs` are held (and held they are, when true).
    fn hold(&mut self, bufs: &[io::IoSlice<'_>]) -> bool {
        let held = match self.phase {
            Phase::Before => Phase::Holding { read_since: false, waited: false },
            holding @ Phase::Holding { .. } => holding,
            Phase::Through => return false,
        };
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if self.held.len() + len > HOLD_LIMIT {
            return false;
        }
        bufs.iter().for_each(|b| self.held.extend_from_slice(b));
        self.phase = held;
        true
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for FirstFlight<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Phase::Holding { read_since, waited } = this.phase else {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        };
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                // Bytes, or the end of the stream: either way the next flush sends.
                this.phase = Phase::Holding { read_since: true, waited };
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if read_since && !waited => {
                // The connection answers what it read when it has nothing more to read: one
                // more turn for it to write and flush.
                this.phase = Phase::Holding { read_since, waited: true };
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Pending => {
                // The peer may be waiting for what is held: send it now.
                ready!(this.poll_release(cx))?;
                ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
                Poll::Pending
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstFlight<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.hold(&[io::IoSlice::new(buf)]) {
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_release(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.hold(bufs) {
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        ready!(this.poll_release(cx))?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.phase {
            Phase::Holding { read_since: false, .. } => return Poll::Ready(Ok(())),
            Phase::Before => return Pin::new(&mut this.inner).poll_flush(cx),
            Phase::Holding { .. } | Phase::Through => {}
        }
        ready!(this.poll_release(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_release(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A peer: scripted reads (`None`: nothing to read yet), and each write and flush recorded.
    #[derive(Default)]
    struct Peer {
        reads: VecDeque<Option<&'static [u8]>>,
        log: Vec<String>,
    }

    impl AsyncRead for Peer {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            match self.reads.pop_front() {
                Some(Some(bytes)) => {
                    buf.put_slice(bytes);
                    Poll::Ready(Ok(()))
                }
                Some(None) => Poll::Pending,
                None => Poll::Ready(Ok(())),
            }
        }
    }

    impl AsyncWrite for Peer {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.log.push(format!("write {}", String::from_utf8_lossy(buf)));
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.log.push("flush".into());
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.log.push("shutdown".into());
            Poll::Ready(Ok(()))
        }
    }

    /// Counts the wake-ups of the connection's task.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the connection does, in order: write, flush, read, shutdown.
    #[derive(Clone, Copy)]
    enum Op {
        W(&'static str),
        F,
        R,
        Shut,
    }
    use Op::*;

    fn run(hold: bool, reads: &[Option<&'static [u8]>], ops: &[Op]) -> (Vec<String>, Vec<String>) {
        let peer = Peer { reads: reads.iter().copied().collect(), log: Vec::new() };
        let mut s = FirstFlight::new(peer, hold);
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut got = Vec::new();
        for op in ops {
            let mut s = Pin::new(&mut s);
            match *op {
                W(text) => {
                    let wrote = s.as_mut().poll_write(&mut cx, text.as_bytes());
                    assert!(matches!(wrote, Poll::Ready(Ok(n)) if n == text.len()), "{wrote:?}");
                }
                F => assert!(matches!(s.as_mut().poll_flush(&mut cx), Poll::Ready(Ok(())))),
                R => {
                    let mut space = [0u8; 64];
                    let mut buf = ReadBuf::new(&mut space);
                    got.push(match s.as_mut().poll_read(&mut cx, &mut buf) {
                        Poll::Ready(Ok(())) => format!("read {}", String::from_utf8_lossy(buf.filled())),
                        Poll::Ready(Err(e)) => format!("error {e}"),
                        Poll::Pending if wakes.0.swap(0, Ordering::Relaxed) > 0 => "pending (woken)".into(),
                        Poll::Pending => "pending".into(),
                    });
                }
                Shut => assert!(matches!(s.as_mut().poll_shutdown(&mut cx), Poll::Ready(Ok(())))),
            }
        }
        (s.inner.log, got)
    }

    /// A name; whether to hold; the peer's reads; the ops; the peer's log; what the reads got.
    type Case = (
        &'static str,
        bool,
        &'static [Option<&'static [u8]>],
        &'static [Op],
        &'static [&'static str],
        &'static [&'static str],
    );

    #[test]
    fn the_first_writes_go_out_together_and_nothing_is_held_for_long() {
        let cases: &[Case] = &[
            (
                "the client's frames already read: SETTINGS and the ACK in one write",
                true,
                &[Some(b"preface"), Some(b"client SETTINGS")],
                &[R, W("SETTINGS"), F, R, W("ACK"), F, W("reply"), F],
                &["write SETTINGSACK", "flush", "write reply", "flush"],
                &["read preface", "read client SETTINGS"],
            ),
            (
                "a flush before anything is written goes through and holds nothing back",
                true,
                &[Some(b"preface"), Some(b"client SETTINGS")],
                &[F, R, W("SETTINGS"), F, R, W("ACK"), F],
                &["flush", "write SETTINGSACK", "flush"],
                &["read preface", "read client SETTINGS"],
            ),
            (
                "as HTTP/2 does: frames read, a read that would wait, the ACK and a flush",
                true,
                &[Some(b"preface"), Some(b"client SETTINGS"), None],
                &[R, W("SETTINGS"), F, R, R, W("ACK"), F],
                &["write SETTINGSACK", "flush"],
                &["read preface", "read client SETTINGS", "pending (woken)"],
            ),
            (
                "frames read and no flush after them: the second read that would wait sends",
                true,
                &[Some(b"preface"), Some(b"client SETTINGS"), None, None],
                &[R, W("SETTINGS"), F, R, R, R],
                &["write SETTINGS", "flush"],
                &["read preface", "read client SETTINGS", "pending (woken)", "pending"],
            ),
            (
                "nothing more to read: SETTINGS go out at once, alone",
                true,
                &[Some(b"preface"), None, Some(b"client SETTINGS")],
                &[R, W("SETTINGS"), F, R, R, W("ACK"), F],
                &["write SETTINGS", "flush", "write ACK", "flush"],
                &["read preface", "pending", "read client SETTINGS"],
            ),
            (
                "the end of the stream: held writes go out on the next flush",
                true,
                &[],
                &[W("SETTINGS"), F, R, F],
                &["write SETTINGS", "flush"],
                &["read "],
            ),
            (
                "shut down while holding: the held writes first",
                true,
                &[],
                &[W("SETTINGS"), F, Shut],
                &["write SETTINGS", "shutdown"],
                &[],
            ),
            (
                "not held (HTTP/1.1): every write and flush goes through",
                false,
                &[Some(b"GET"), Some(b"GET")],
                &[R, W("reply"), F, R, W("reply"), F],
                &["write reply", "flush", "write reply", "flush"],
                &["read GET", "read GET"],
            ),
        ];
        for (name, hold, reads, ops, writes, got_want) in cases {
            let (log, got) = run(*hold, reads, ops);
            assert_eq!(log, writes.iter().map(|w| w.to_string()).collect::<Vec<_>>(), "{name}");
            assert_eq!(got, got_want.iter().map(|w| w.to_string()).collect::<Vec<_>>(), "{name}");
        }
    }

    #[test]
    fn more_than_the_limit_is_never_held() {
        static BIG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let big: &'static str = BIG.get_or_init(|| "x".repeat(HOLD_LIMIT));
        let (log, _) = run(true, &[], &[W("SETTINGS"), W(big)]);
        assert_eq!(log.len(), 2);
        assert_eq!(log[0], "write SETTINGS");
        assert_eq!(log[1].len(), "write ".len() + HOLD_LIMIT);
    }
}
