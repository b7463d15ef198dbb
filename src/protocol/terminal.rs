//! A terminal's modes as `pty-req` carries them (RFC 4254 section 8): the
//! one table between the SSH opcodes and termios, read by `mn-ssh` (its
//! terminal's modes, encoded) and by the agent (the modes, applied to the
//! pty it opens).
//!
//! Speeds (`TTY_OP_ISPEED`/`OSPEED`) are not sent nor applied: a pty has none
//! that matters. Opcodes this system has no flag for are ignored.

use nix::sys::termios::{
    ControlFlags, InputFlags, LocalFlags, OutputFlags, SpecialCharacterIndices as Cc, Termios,
};
use russh::Pty;

/// The control characters.
const CHARS: &[(Pty, Cc)] = &[
    (Pty::VINTR, Cc::VINTR),
    (Pty::VQUIT, Cc::VQUIT),
    (Pty::VERASE, Cc::VERASE),
    (Pty::VKILL, Cc::VKILL),
    (Pty::VEOF, Cc::VEOF),
    (Pty::VEOL, Cc::VEOL),
    (Pty::VEOL2, Cc::VEOL2),
    (Pty::VSTART, Cc::VSTART),
    (Pty::VSTOP, Cc::VSTOP),
    (Pty::VSUSP, Cc::VSUSP),
    (Pty::VREPRINT, Cc::VREPRINT),
    (Pty::VWERASE, Cc::VWERASE),
    (Pty::VLNEXT, Cc::VLNEXT),
    (Pty::VDISCARD, Cc::VDISCARD),
];

const INPUT: &[(Pty, InputFlags)] = &[
    (Pty::IGNPAR, InputFlags::IGNPAR),
    (Pty::PARMRK, InputFlags::PARMRK),
    (Pty::INPCK, InputFlags::INPCK),
    (Pty::ISTRIP, InputFlags::ISTRIP),
    (Pty::INLCR, InputFlags::INLCR),
    (Pty::IGNCR, InputFlags::IGNCR),
    (Pty::ICRNL, InputFlags::ICRNL),
    (Pty::IXON, InputFlags::IXON),
    (Pty::IXANY, InputFlags::IXANY),
    (Pty::IXOFF, InputFlags::IXOFF),
    (Pty::IMAXBEL, InputFlags::IMAXBEL),
    (Pty::IUTF8, InputFlags::IUTF8),
];

const LOCAL: &[(Pty, LocalFlags)] = &[
    (Pty::ISIG, LocalFlags::ISIG),
    (Pty::ICANON, LocalFlags::ICANON),
    (Pty::ECHO, LocalFlags::ECHO),
    (Pty::ECHOE, LocalFlags::ECHOE),
    (Pty::ECHOK, LocalFlags::ECHOK),
    (Pty::ECHONL, LocalFlags::ECHONL),
    (Pty::NOFLSH, LocalFlags::NOFLSH),
    (Pty::TOSTOP, LocalFlags::TOSTOP),
    (Pty::IEXTEN, LocalFlags::IEXTEN),
    (Pty::ECHOCTL, LocalFlags::ECHOCTL),
    (Pty::ECHOKE, LocalFlags::ECHOKE),
    (Pty::PENDIN, LocalFlags::PENDIN),
];

const OUTPUT: &[(Pty, OutputFlags)] = &[
    (Pty::OPOST, OutputFlags::OPOST),
    (Pty::ONLCR, OutputFlags::ONLCR),
    (Pty::OCRNL, OutputFlags::OCRNL),
    (Pty::ONOCR, OutputFlags::ONOCR),
    (Pty::ONLRET, OutputFlags::ONLRET),
];

const CONTROL: &[(Pty, ControlFlags)] = &[
    (Pty::PARENB, ControlFlags::PARENB),
    (Pty::PARODD, ControlFlags::PARODD),
];

/// The modes of a terminal, as `pty-req` sends them.
pub fn encode(t: &Termios) -> Vec<(Pty, u32)> {
    let on = |set: bool| u32::from(set);
    let mut modes = Vec::with_capacity(48);
    for (op, cc) in CHARS {
        modes.push((*op, u32::from(t.control_chars[*cc as usize])));
    }
    modes.extend(
        INPUT
            .iter()
            .map(|(op, f)| (*op, on(t.input_flags.contains(*f)))),
    );
    modes.extend(
        LOCAL
            .iter()
            .map(|(op, f)| (*op, on(t.local_flags.contains(*f)))),
    );
    modes.extend(
        OUTPUT
            .iter()
            .map(|(op, f)| (*op, on(t.output_flags.contains(*f)))),
    );
    let size = t.control_flags & ControlFlags::CSIZE;
    modes.push((Pty::CS7, on(size == ControlFlags::CS7)));
    modes.push((Pty::CS8, on(size == ControlFlags::CS8)));
    modes.extend(
        CONTROL
            .iter()
            .map(|(op, f)| (*op, on(t.control_flags.contains(*f)))),
    );
    modes
}

/// Sets the modes a client sent over `t`; those it did not send keep their value.
pub fn apply(t: &mut Termios, modes: &[(Pty, u32)]) {
    for &(op, value) in modes {
        let on = value != 0;
        if let Some((_, cc)) = CHARS.iter().find(|(o, _)| *o == op) {
            // A control character is one byte; 255 is _POSIX_VDISABLE's SSH form.
            t.control_chars[*cc as usize] = u8::try_from(value).unwrap_or(0xff);
        } else if let Some((_, f)) = INPUT.iter().find(|(o, _)| *o == op) {
            t.input_flags.set(*f, on);
        } else if let Some((_, f)) = LOCAL.iter().find(|(o, _)| *o == op) {
            t.local_flags.set(*f, on);
        } else if let Some((_, f)) = OUTPUT.iter().find(|(o, _)| *o == op) {
            t.output_flags.set(*f, on);
        } else if let Some((_, f)) = CONTROL.iter().find(|(o, _)| *o == op) {
            t.control_flags.set(*f, on);
        } else if on && matches!(op, Pty::CS7 | Pty::CS8) {
            t.control_flags.remove(ControlFlags::CSIZE);
            t.control_flags.insert(if op == Pty::CS7 {
                ControlFlags::CS7
            } else {
                ControlFlags::CS8
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pty_termios() -> Termios {
        let pty = nix::pty::openpty(None, None).unwrap();
        nix::sys::termios::tcgetattr(&pty.slave).unwrap()
    }

    #[test]
    fn modes_encoded_and_applied_come_back_the_same() {
        let mut from = pty_termios();
        from.local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ICANON);
        from.input_flags.remove(InputFlags::ICRNL);
        from.control_chars[Cc::VINTR as usize] = 7;
        let modes = encode(&from);
        assert!(modes.contains(&(Pty::ECHO, 0)));
        assert!(modes.contains(&(Pty::ISIG, 1)));
        assert!(modes.contains(&(Pty::VINTR, 7)));
        let mut to = pty_termios();
        apply(&mut to, &modes);
        assert_eq!(to.local_flags, from.local_flags);
        assert_eq!(to.input_flags, from.input_flags);
        assert_eq!(to.output_flags, from.output_flags);
        assert_eq!(to.control_chars[Cc::VINTR as usize], 7);
        assert_eq!(to.control_flags & ControlFlags::CSIZE, ControlFlags::CS8);
    }
}
