//! What the kernel knows of one TCP connection (`TCP_INFO`, and the bytes
//! queued each way), read in this one place: for the client's liveness
//! watch (`transport::client`) and the agent's watchdog (`agent::server`).

use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// `TCP_ESTABLISHED` of the kernel's `tcp_states` (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 1;

/// One connection's state, as its kernel tells it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TcpState {
    pub established: bool,
    /// Since the last bytes came from the peer.
    pub since_recv: Duration,
    /// Since the peer last acknowledged anything.
    pub since_ack_recv: Duration,
    /// Bytes for the peer not sent or not acknowledged yet (`TIOCOUTQ`).
    pub unsent: u32,
    /// Bytes from the peer not read yet (`FIONREAD`).
    pub unread: u32,
    /// The peer's window is zero and its probes are answered; `None` on a
    /// kernel before 5.4, which does not tell.
    pub zero_window: Option<bool>,
    /// Bytes the peer has acknowledged on this connection.
    pub bytes_acked: u64,
}

/// The head of Linux's `struct tcp_info` (include/uapi/linux/tcp.h) up to
/// `tcpi_snd_wnd` (Linux 5.4), which libc's musl definition lacks.
#[repr(C)]
#[derive(Default)]
struct TcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
}

/// `TCP_INFO` of `fd`, with how many bytes of it the kernel filled.
fn tcp_info(fd: &impl AsFd) -> Option<(TcpInfo, usize)> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: TcpInfo is plain data laid out as the kernel's; getsockopt
    // writes at most `len` bytes of it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfo).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some((info, len as usize))
}

/// Whether the connection of `fd` is established; `None` when `fd` is not
/// a TCP socket the kernel answers for.
pub(crate) fn established(fd: &impl AsFd) -> Option<bool> {
    tcp_info(fd).map(|(info, _)| info.state == TCP_ESTABLISHED)
}

/// The whole state of the connection of `fd`; `None` when the kernel does
/// not answer.
pub(crate) fn read(fd: &impl AsFd) -> Option<TcpState> {
    let raw = fd.as_fd().as_raw_fd();
    let (info, len) = tcp_info(fd)?;
    let (mut unsent, mut unread): (libc::c_int, libc::c_int) = (0, 0);
    // SAFETY: each ioctl writes one int to the place given; `raw` is open
    // for the call (borrowed from `fd`).
    let ok = unsafe {
        libc::ioctl(raw, libc::TIOCOUTQ, &mut unsent) == 0
            && libc::ioctl(raw, libc::FIONREAD, &mut unread) == 0
    };
    if !ok {
        return None;
    }
    let has_wnd = len >= std::mem::size_of::<TcpInfo>();
    Some(TcpState {
        established: info.state == TCP_ESTABLISHED,
        since_recv: Duration::from_millis(u64::from(info.last_data_recv)),
        since_ack_recv: Duration::from_millis(u64::from(info.last_ack_recv)),
        unsent: u32::try_from(unsent).unwrap_or(0),
        unread: u32::try_from(unread).unwrap_or(0),
        zero_window: has_wnd.then_some(info.snd_wnd == 0 && info.probes == 0),
        bytes_acked: info.bytes_acked,
    })
}
