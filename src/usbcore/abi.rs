//! The usbfs ABI: ioctl numbers and the layouts of the structs a caller
//! hands to them, as `include/uapi/linux/usbdevice_fs.h` defines them for a
//! 64-bit caller. usbfs names its directions from the caller's side, so a
//! command the kernel reads is `_IOR` there (`SUBMITURB`, `CLAIMINTERFACE`).

/// `_IOC(dir, 'U', nr, size)`.
const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | ((b'U' as u32) << 8) | nr
}
const NONE: u32 = 0;
const W: u32 = 1;
const R: u32 = 2;

/// Size of `struct usbdevfs_ctrltransfer`.
pub const CTRL_SIZE: usize = 24;
/// Size of `struct usbdevfs_bulktransfer`.
pub const BULK_SIZE: usize = 24;
/// Size of `struct usbdevfs_urb` (without its packet descriptors).
pub const URB_SIZE: usize = 56;
/// Size of one `struct usbdevfs_iso_packet_desc`.
pub const ISO_DESC_SIZE: usize = 12;
/// Size of `struct usbdevfs_getdriver`.
pub const GETDRIVER_SIZE: usize = 260;
/// Size of `struct usbdevfs_disconnect_claim`.
pub const DISCONNECT_CLAIM_SIZE: usize = 264;
/// Size of `struct usbdevfs_ioctl`.
pub const IOCTL_SIZE: usize = 16;
/// Size of `struct usbdevfs_conninfo_ex`.
pub const CONNINFO_EX_SIZE: usize = 24;
/// `USBDEVFS_MAXDRIVERNAME + 1`.
pub const DRIVER_NAME: usize = 256;

/// USBDEVFS_CONTROL.
pub const CONTROL: u32 = ioc(R | W, 0, CTRL_SIZE as u32);
/// USBDEVFS_BULK.
pub const BULK: u32 = ioc(R | W, 2, BULK_SIZE as u32);
/// USBDEVFS_RESETEP.
pub const RESETEP: u32 = ioc(R, 3, 4);
/// USBDEVFS_SETINTERFACE.
pub const SETINTERFACE: u32 = ioc(R, 4, 8);
/// USBDEVFS_SETCONFIGURATION.
pub const SETCONFIGURATION: u32 = ioc(R, 5, 4);
/// USBDEVFS_GETDRIVER.
pub const GETDRIVER: u32 = ioc(W, 8, GETDRIVER_SIZE as u32);
/// USBDEVFS_SUBMITURB.
pub const SUBMITURB: u32 = ioc(R, 10, URB_SIZE as u32);
/// USBDEVFS_DISCARDURB.
pub const DISCARDURB: u32 = ioc(NONE, 11, 0);
/// USBDEVFS_REAPURB.
pub const REAPURB: u32 = ioc(W, 12, 8);
/// USBDEVFS_REAPURBNDELAY.
pub const REAPURBNDELAY: u32 = ioc(W, 13, 8);
/// USBDEVFS_DISCSIGNAL.
pub const DISCSIGNAL: u32 = ioc(R, 14, 16);
/// USBDEVFS_CLAIMINTERFACE.
pub const CLAIMINTERFACE: u32 = ioc(R, 15, 4);
/// USBDEVFS_RELEASEINTERFACE.
pub const RELEASEINTERFACE: u32 = ioc(R, 16, 4);
/// USBDEVFS_CONNECTINFO.
pub const CONNECTINFO: u32 = ioc(W, 17, 8);
/// USBDEVFS_IOCTL.
pub const IOCTL: u32 = ioc(R | W, 18, IOCTL_SIZE as u32);
/// USBDEVFS_HUB_PORTINFO.
pub const HUB_PORTINFO: u32 = ioc(R, 19, 128);
/// USBDEVFS_RESET.
pub const RESET: u32 = ioc(NONE, 20, 0);
/// USBDEVFS_CLEAR_HALT.
pub const CLEAR_HALT: u32 = ioc(R, 21, 4);
/// USBDEVFS_DISCONNECT (as an ioctl_code of USBDEVFS_IOCTL).
pub const DISCONNECT: u32 = ioc(NONE, 22, 0);
/// USBDEVFS_CONNECT (as an ioctl_code of USBDEVFS_IOCTL).
pub const CONNECT: u32 = ioc(NONE, 23, 0);
/// USBDEVFS_CLAIM_PORT.
pub const CLAIM_PORT: u32 = ioc(R, 24, 4);
/// USBDEVFS_RELEASE_PORT.
pub const RELEASE_PORT: u32 = ioc(R, 25, 4);
/// USBDEVFS_GET_CAPABILITIES.
pub const GET_CAPABILITIES: u32 = ioc(R, 26, 4);
/// USBDEVFS_DISCONNECT_CLAIM.
pub const DISCONNECT_CLAIM: u32 = ioc(R, 27, DISCONNECT_CLAIM_SIZE as u32);
/// USBDEVFS_ALLOC_STREAMS.
pub const ALLOC_STREAMS: u32 = ioc(R, 28, 8);
/// USBDEVFS_FREE_STREAMS.
pub const FREE_STREAMS: u32 = ioc(R, 29, 8);
/// USBDEVFS_DROP_PRIVILEGES.
pub const DROP_PRIVILEGES: u32 = ioc(W, 30, 4);
/// USBDEVFS_GET_SPEED.
pub const GET_SPEED: u32 = ioc(NONE, 31, 0);
/// USBDEVFS_CONNINFO_EX(len) without its length.
pub const CONNINFO_EX_BASE: u32 = ioc(R, 32, 0);
/// USBDEVFS_FORBID_SUSPEND.
pub const FORBID_SUSPEND: u32 = ioc(NONE, 33, 0);
/// USBDEVFS_ALLOW_SUSPEND.
pub const ALLOW_SUSPEND: u32 = ioc(NONE, 34, 0);
/// USBDEVFS_WAIT_FOR_RESUME.
pub const WAIT_FOR_RESUME: u32 = ioc(NONE, 35, 0);

/// USBDEVFS_URB_SHORT_NOT_OK.
pub const URB_SHORT_NOT_OK: u32 = 0x01;
/// USBDEVFS_URB_ISO_ASAP.
pub const URB_ISO_ASAP: u32 = 0x02;
/// USBDEVFS_URB_BULK_CONTINUATION.
pub const URB_BULK_CONTINUATION: u32 = 0x04;
/// USBDEVFS_URB_NO_FSBR.
pub const URB_NO_FSBR: u32 = 0x20;
/// USBDEVFS_URB_ZERO_PACKET.
pub const URB_ZERO_PACKET: u32 = 0x40;
/// USBDEVFS_URB_NO_INTERRUPT.
pub const URB_NO_INTERRUPT: u32 = 0x80;

/// USBDEVFS_CAP_ZERO_PACKET.
pub const CAP_ZERO_PACKET: u32 = 0x01;
/// USBDEVFS_CAP_NO_PACKET_SIZE_LIM.
pub const CAP_NO_PACKET_SIZE_LIM: u32 = 0x04;
/// USBDEVFS_CAP_REAP_AFTER_DISCONNECT.
pub const CAP_REAP_AFTER_DISCONNECT: u32 = 0x10;
/// USBDEVFS_CAP_DROP_PRIVILEGES.
pub const CAP_DROP_PRIVILEGES: u32 = 0x40;
/// USBDEVFS_CAP_CONNINFO_EX.
pub const CAP_CONNINFO_EX: u32 = 0x80;
/// USBDEVFS_CAP_SUSPEND.
pub const CAP_SUSPEND: u32 = 0x100;

/// USBDEVFS_DISCONNECT_CLAIM_IF_DRIVER.
pub const DISCONNECT_CLAIM_IF_DRIVER: u32 = 0x01;
/// USBDEVFS_DISCONNECT_CLAIM_EXCEPT_DRIVER.
pub const DISCONNECT_CLAIM_EXCEPT_DRIVER: u32 = 0x02;

/// Offsets in `struct usbdevfs_urb` (64-bit).
pub mod urb {
    /// `unsigned char type`.
    pub const TYPE: usize = 0;
    /// `unsigned char endpoint`.
    pub const ENDPOINT: usize = 1;
    /// `int status`.
    pub const STATUS: usize = 4;
    /// `unsigned int flags`.
    pub const FLAGS: usize = 8;
    /// `void *buffer`.
    pub const BUFFER: usize = 16;
    /// `int buffer_length`.
    pub const BUFFER_LENGTH: usize = 24;
    /// `int actual_length`.
    pub const ACTUAL_LENGTH: usize = 28;
    /// `int start_frame`.
    pub const START_FRAME: usize = 32;
    /// `int number_of_packets` / `unsigned int stream_id`.
    pub const NUMBER_OF_PACKETS: usize = 36;
    /// `int error_count`.
    pub const ERROR_COUNT: usize = 40;
    /// `unsigned int signr`.
    pub const SIGNR: usize = 44;
    /// `void *usercontext`.
    pub const USERCONTEXT: usize = 48;
    /// `struct usbdevfs_iso_packet_desc iso_frame_desc[]`.
    pub const ISO: usize = 56;
}

/// The descriptors of a raw configuration descriptor (or any run of
/// descriptors), one slice each, up to the first malformed one (a length
/// under 2 or past the end).
pub fn descriptors(cfg: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let len = *cfg.get(off)? as usize;
        if len < 2 || off + len > cfg.len() {
            return None;
        }
        let d = &cfg[off..off + len];
        off += len;
        Some(d)
    })
}

/// A little-endian u32 at `off` of `b` (0 past its end).
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}

/// A little-endian u64 at `off` of `b` (0 past its end).
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}

/// A little-endian u16 at `off` of `b` (0 past its end).
pub fn u16_at(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_kernels() {
        // As a 64-bit build of usbdevice_fs.h computes them.
        assert_eq!(CONTROL, 0xc018_5500);
        assert_eq!(BULK, 0xc018_5502);
        assert_eq!(RESETEP, 0x8004_5503);
        assert_eq!(SETINTERFACE, 0x8008_5504);
        assert_eq!(SETCONFIGURATION, 0x8004_5505);
        assert_eq!(GETDRIVER, 0x4104_5508);
        assert_eq!(SUBMITURB, 0x8038_550a);
        assert_eq!(DISCARDURB, 0x550b);
        assert_eq!(REAPURB, 0x4008_550c);
        assert_eq!(REAPURBNDELAY, 0x4008_550d);
        assert_eq!(DISCSIGNAL, 0x8010_550e);
        assert_eq!(CLAIMINTERFACE, 0x8004_550f);
        assert_eq!(RELEASEINTERFACE, 0x8004_5510);
        assert_eq!(CONNECTINFO, 0x4008_5511);
        assert_eq!(IOCTL, 0xc010_5512);
        assert_eq!(RESET, 0x5514);
        assert_eq!(CLEAR_HALT, 0x8004_5515);
        assert_eq!(DISCONNECT, 0x5516);
        assert_eq!(CONNECT, 0x5517);
        assert_eq!(GET_CAPABILITIES, 0x8004_551a);
        assert_eq!(DISCONNECT_CLAIM, 0x8108_551b);
        assert_eq!(DROP_PRIVILEGES, 0x4004_551e);
        assert_eq!(GET_SPEED, 0x551f);
        assert_eq!(CONNINFO_EX_BASE | (24 << 16), 0x8018_5520);
    }
}
