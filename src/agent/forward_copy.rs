//! A `direct-tcpip` channel's bytes, both ways, without copy buffers:
//! russh's packets written to the destination as they come (at most
//! [`HELD_MAX`] held for one that does not read, ended after
//! [`STALL_LIMIT`] without taking a byte), and the destination's bytes read
//! as much as it holds.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use russh::server::Msg;
use russh::{ChannelMsg, ChannelReadHalf, ChannelWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::debug;

/// Bytes from the client a forward holds for a destination that has not
/// taken them yet (past the socket's own buffers): what one forward's copy
/// buffer was. Past it the forward stops taking from the connection.
pub(crate) const HELD_MAX: usize = 256 * 1024;
/// How long a forward that stopped taking from the connection (its
/// destination does not read) may hold the connection's read loop with
/// no byte taken, before it is ended.
pub(crate) const STALL_LIMIT: Duration = Duration::from_secs(5);
/// Bytes read from a destination at once (what the copy buffer was): at
/// most what it has sent (its unread count), so an idle forward holds no
/// buffer.
const READ_CHUNK: usize = 256 * 1024;
/// The least room a read is given.
const READ_MIN_ROOM: usize = 512;
/// Buffers written to a destination in one system call.
const WRITE_SLICES: usize = 16;
/// How a forward ended.
pub(super) enum ForwardEnd {
    /// Both sides sent their EOF and everything was delivered.
    Done,
    /// The client closed the channel.
    ClientClosed,
    /// The destination took nothing for [`STALL_LIMIT`] while the
    /// forward held [`HELD_MAX`] bytes for it.
    Stalled,
    /// A socket or the session failed.
    Failed(String),
}

/// The client-to-destination way's counts.
#[derive(Default)]
pub(super) struct Up {
    /// Bytes written to the destination.
    pub(super) total: u64,
    /// Bytes held for it now, and at most.
    pub(super) held: usize,
    pub(super) peak: usize,
}

/// Copies both ways until both sides sent their EOF, the client closes
/// the channel, a side fails, or the destination stalls.
pub(super) async fn copy_both_ways(
    rx: &mut ChannelReadHalf,
    tx: &ChannelWriteHalf<Msg>,
    tcp: &TcpStream,
    counts: &mut Up,
) -> ForwardEnd {
    let down = to_client(tx, tcp);
    tokio::pin!(down);
    let mut down_done = false;
    {
        let up = to_destination(rx, tcp, counts);
        tokio::pin!(up);
        loop {
            tokio::select! {
                ended = &mut up => match ended {
                    Ok(()) => break,
                    Err(end) => return end,
                },
                ended = &mut down, if !down_done => match ended {
                    Ok(()) => down_done = true,
                    Err(end) => return end,
                },
            }
        }
    }
    // The client's EOF went to the destination: its bytes until its own
    // EOF, and the channel read on (never held), for a close.
    while !down_done {
        tokio::select! {
            ended = &mut down => match ended {
                Ok(()) => down_done = true,
                Err(end) => return end,
            },
            msg = rx.wait() => {
                if matches!(msg, Some(ChannelMsg::Close) | None) {
                    return ForwardEnd::ClientClosed;
                }
            }
        }
    }
    ForwardEnd::Done
}

/// The client's bytes to the destination, as russh hands them over (no
/// copy), until the client's EOF (then the socket's write side is shut
/// down). At most [`HELD_MAX`] bytes wait here; past that the channel is
/// not read, and [`STALL_LIMIT`] with nothing written ends the forward.
async fn to_destination(
    rx: &mut ChannelReadHalf,
    tcp: &TcpStream,
    counts: &mut Up,
) -> Result<(), ForwardEnd> {
    let mut held: VecDeque<Bytes> = VecDeque::new();
    let mut eof = false;
    // Since when the forward has held `HELD_MAX` bytes with none written.
    let mut stalled_since: Option<Instant> = None;
    loop {
        if eof && held.is_empty() {
            let _ = nix::sys::socket::shutdown(tcp.as_raw_fd(), nix::sys::socket::Shutdown::Write);
            return Ok(());
        }
        let taking = !eof && counts.held < HELD_MAX;
        let stall = async {
            match stalled_since {
                Some(since) => tokio::time::sleep_until(since + STALL_LIMIT).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            ready = tcp.writable(), if !held.is_empty() => {
                if let Err(e) = ready {
                    return Err(ForwardEnd::Failed(e.to_string()));
                }
                match write_held(tcp, &mut held) {
                    Ok(n) => {
                        counts.held -= n;
                        counts.total += n as u64;
                        if n > 0 && stalled_since.is_some() {
                            stalled_since = Some(Instant::now());
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(ForwardEnd::Failed(e.to_string())),
                }
            }
            msg = rx.wait(), if taking => {
                take(msg, &mut held, &mut eof, counts)?;
                // And what else is queued already: one write for several
                // packets.
                while !eof && counts.held < HELD_MAX {
                    match queued(rx).await {
                        Some(msg) => take(msg, &mut held, &mut eof, counts)?,
                        None => break,
                    }
                }
            }
            () = stall => return Err(ForwardEnd::Stalled),
        }
        // After the client's EOF nothing more comes: the connection does
        // not wait for this forward, however slow its destination.
        if counts.held < HELD_MAX || eof {
            stalled_since = None;
        } else if stalled_since.is_none() {
            stalled_since = Some(Instant::now());
        }
    }
}

/// One message of the channel, for the destination: its data held.
fn take(
    msg: Option<ChannelMsg>,
    held: &mut VecDeque<Bytes>,
    eof: &mut bool,
    counts: &mut Up,
) -> Result<(), ForwardEnd> {
    match msg {
        Some(ChannelMsg::Data { data }) => {
            counts.held += data.len();
            counts.peak = counts.peak.max(counts.held);
            held.push_back(data);
        }
        Some(ChannelMsg::Eof) => *eof = true,
        Some(ChannelMsg::Close) | None => return Err(ForwardEnd::ClientClosed),
        Some(_) => {}
    }
    Ok(())
}

/// The channel's next message if one is queued now (`None` if none is):
/// never waits.
async fn queued(rx: &mut ChannelReadHalf) -> Option<Option<ChannelMsg>> {
    tokio::select! {
        biased;
        msg = rx.wait() => Some(msg),
        () = std::future::ready(()) => None,
    }
}

/// Writes what `held` holds, as much as the socket takes now without
/// waiting, in one system call; drops what was written.
fn write_held(tcp: &TcpStream, held: &mut VecDeque<Bytes>) -> std::io::Result<usize> {
    let written = {
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
        let n = held
            .iter()
            .zip(slices.iter_mut())
            .map(|(b, s)| *s = IoSlice::new(b))
            .count();
        tcp.try_write_vectored(&slices[..n])?
    };
    let mut left = written;
    while left > 0 {
        let Some(front) = held.front_mut() else { break };
        if front.len() <= left {
            left -= front.len();
            held.pop_front();
        } else {
            front.advance(left);
            left = 0;
        }
    }
    Ok(written)
}

/// The destination's bytes to the client until its EOF (then the
/// channel's). Each read takes what the socket holds (at most
/// [`READ_CHUNK`]) into a buffer of that size, handed to russh whole: an
/// idle forward holds no buffer. Sending waits for the client's window on
/// this channel alone.
async fn to_client(tx: &ChannelWriteHalf<Msg>, tcp: &TcpStream) -> Result<(), ForwardEnd> {
    let mut buf = BytesMut::new();
    loop {
        if let Err(e) = tcp.readable().await {
            return Err(ForwardEnd::Failed(e.to_string()));
        }
        let unread = bytes_unread(tcp).min(READ_CHUNK);
        if buf.capacity() < unread {
            buf.reserve(unread.max(READ_MIN_ROOM));
        }
        // With nothing unread and no room, this reads into the 64 bytes
        // `BytesMut` reserves itself: the end of the stream, or bytes
        // that came just now.
        match tcp.try_read_buf(&mut buf) {
            Ok(0) => {
                let _ = tx.eof().await;
                return Ok(());
            }
            Ok(_) => {
                if let Err(e) = tx.data_bytes(buf.split().freeze()).await {
                    return Err(ForwardEnd::Failed(e.to_string()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(ForwardEnd::Failed(e.to_string())),
        }
    }
}

/// How many bytes `tcp` holds unread (`FIONREAD`; 0 when it cannot tell).
fn bytes_unread(tcp: &TcpStream) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid.
    let rc = unsafe { libc::ioctl(tcp.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

/// The socket's close resets the connection (`SO_LINGER` 0).
pub(super) fn reset_on_close(tcp: &TcpStream) {
    let abort = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    if let Err(e) = nix::sys::socket::setsockopt(tcp, nix::sys::socket::sockopt::Linger, &abort) {
        debug!(error = %e, "SO_LINGER not set: the close sends a FIN");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held buffers go out whole and in order whatever each write takes:
    /// a small send buffer and a slow reader make the writes partial.
    #[tokio::test]
    async fn held_bytes_are_written_in_order_across_partial_writes() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let _ = nix::sys::socket::setsockopt(&tcp, nix::sys::socket::sockopt::SndBuf, &4096);
        let (mut peer, _) = listener.accept().await.unwrap();
        let parts: Vec<Vec<u8>> = (0..40u8)
            .map(|i| vec![i; 1000 + 997 * usize::from(i)])
            .collect();
        let expected: Vec<u8> = parts.concat();
        let mut held: VecDeque<Bytes> = parts.into_iter().map(Bytes::from).collect();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 1500];
            loop {
                tokio::time::sleep(Duration::from_micros(100)).await;
                match peer.read(&mut buf).await.unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let mut total = 0;
        let mut writes = 0;
        while !held.is_empty() {
            tcp.writable().await.unwrap();
            match write_held(&tcp, &mut held) {
                Ok(n) => {
                    total += n;
                    writes += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(total, expected.len());
        assert!(writes > 1, "one write took it all: nothing was partial");
        nix::sys::socket::shutdown(tcp.as_raw_fd(), nix::sys::socket::Shutdown::Write).unwrap();
        assert!(
            reader.await.unwrap() == expected,
            "bytes lost or out of order"
        );
    }
}
