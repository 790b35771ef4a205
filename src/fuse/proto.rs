//! The FUSE kernel protocol (`include/uapi/linux/fuse.h`), the parts monfs
//! speaks: request parsing and reply encoding. Written from the protocol
//! description; all fields little-endian host order on x86_64/arm64.

/// Protocol major version.
pub const KERNEL_VERSION: u32 = 7;
/// The minor version we implement (7.31: max_pages, ioctl dir, atomic O_TRUNC).
pub const KERNEL_MINOR: u32 = 31;

/// Size of `struct fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// Size of `struct fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;

/// Opcodes.
#[allow(missing_docs)]
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const MKDIR: u32 = 9;
    pub const RMDIR: u32 = 11;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const BATCH_FORGET: u32 = 42;
    pub const READDIRPLUS: u32 = 44;
    pub const LSEEK: u32 = 46;
    pub const CUSE_INIT: u32 = 4096;
}

/// The request type `monfs/requests` counts a request under: its opcode,
/// and for an ioctl also its command.
pub fn request_key(opcode: u32, body: &[u8]) -> u64 {
    if opcode != op::IOCTL {
        return opcode as u64;
    }
    // struct fuse_ioctl_in: fh (8), flags (4), cmd (4), ...
    let cmd = body
        .get(12..16)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    (1 << 32) | cmd as u64
}

/// The name of a [`request_key`]: the opcode's name as in the kernel's
/// `enum fuse_opcode`, an ioctl by its command's `_IOC` parts
/// (`IOCTL:_IOWR(0x92,7,16)`: direction, type, number, size).
pub fn request_label(key: u64) -> String {
    if key >> 32 == 1 {
        let cmd = key as u32;
        let (ty, nr, size) = ((cmd >> 8) & 0xff, cmd & 0xff, (cmd >> 16) & 0x3fff);
        return match cmd >> 30 {
            0 => format!("IOCTL:_IO({ty:#x},{nr})"),
            1 => format!("IOCTL:_IOW({ty:#x},{nr},{size})"),
            2 => format!("IOCTL:_IOR({ty:#x},{nr},{size})"),
            _ => format!("IOCTL:_IOWR({ty:#x},{nr},{size})"),
        };
    }
    let name = match key {
        1 => "LOOKUP",
        2 => "FORGET",
        3 => "GETATTR",
        4 => "SETATTR",
        5 => "READLINK",
        6 => "SYMLINK",
        8 => "MKNOD",
        9 => "MKDIR",
        10 => "UNLINK",
        11 => "RMDIR",
        12 => "RENAME",
        13 => "LINK",
        14 => "OPEN",
        15 => "READ",
        16 => "WRITE",
        17 => "STATFS",
        18 => "RELEASE",
        20 => "FSYNC",
        21 => "SETXATTR",
        22 => "GETXATTR",
        23 => "LISTXATTR",
        24 => "REMOVEXATTR",
        25 => "FLUSH",
        26 => "INIT",
        27 => "OPENDIR",
        28 => "READDIR",
        29 => "RELEASEDIR",
        30 => "FSYNCDIR",
        31 => "GETLK",
        32 => "SETLK",
        33 => "SETLKW",
        34 => "ACCESS",
        35 => "CREATE",
        36 => "INTERRUPT",
        37 => "BMAP",
        38 => "DESTROY",
        40 => "POLL",
        41 => "NOTIFY_REPLY",
        42 => "BATCH_FORGET",
        43 => "FALLOCATE",
        44 => "READDIRPLUS",
        45 => "RENAME2",
        46 => "LSEEK",
        47 => "COPY_FILE_RANGE",
        50 => "SYNCFS",
        51 => "TMPFILE",
        52 => "STATX",
        4096 => "CUSE_INIT",
        n => return format!("OPCODE_{n}"),
    };
    name.to_string()
}

/// INIT flags.
#[allow(missing_docs)]
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const ATOMIC_O_TRUNC: u64 = 1 << 3;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const HAS_IOCTL_DIR: u64 = 1 << 11;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;
}

/// `fuse_open_out.open_flags`.
#[allow(missing_docs)]
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NONSEEKABLE: u32 = 1 << 2;
    pub const STREAM: u32 = 1 << 4;
}

/// `fuse_ioctl_in.flags`.
#[allow(missing_docs)]
pub mod ioctl_flags {
    pub const COMPAT: u32 = 1 << 0;
    pub const UNRESTRICTED: u32 = 1 << 1;
    pub const RETRY: u32 = 1 << 2;
    pub const BIT32: u32 = 1 << 3;
}

/// `cuse_init_out.flags`: ioctls are unrestricted (retry protocol).
pub const CUSE_UNRESTRICTED_IOCTL: u32 = 1 << 0;

/// `fuse_read_in.read_flags`: the lock owner is valid (set on read(2) of
/// direct-I/O files, not on page-cache fills).
pub const READ_LOCKOWNER: u32 = 1 << 1;

/// `fuse_poll_in.flags`: the kernel wants a wake-up notification.
pub const POLL_SCHEDULE_NOTIFY: u32 = 1 << 0;

/// Notification codes (sent with unique 0).
#[allow(missing_docs)]
pub mod notify {
    pub const POLL: i32 = 1;
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const STORE: i32 = 4;
}

/// `FATTR_SIZE` in `fuse_setattr_in.valid`.
pub const FATTR_SIZE: u32 = 1 << 3;

/// The request header.
#[derive(Clone, Copy, Debug, Default)]
pub struct InHeader {
    /// Total request length.
    pub len: u32,
    /// Opcode.
    pub opcode: u32,
    /// Request id.
    pub unique: u64,
    /// Inode the request is about.
    pub nodeid: u64,
    /// Caller's fsuid.
    pub uid: u32,
    /// Caller's fsgid.
    pub gid: u32,
    /// Caller's thread id.
    pub pid: u32,
}

/// A little-endian reader over a request body.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Read from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Take `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    /// A u32.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    /// A u64.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    /// What is left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos.min(self.buf.len())..];
        self.pos = self.buf.len();
        s
    }
    /// A NUL-terminated name, its bytes as [`crate::base::bytestr`] text.
    pub fn cstr(&mut self) -> Option<std::borrow::Cow<'a, str>> {
        let rest = &self.buf[self.pos..];
        let end = rest.iter().position(|&b| b == 0)?;
        self.pos += end + 1;
        Some(crate::base::bytestr::text(&rest[..end]))
    }
}

/// Parse the 40-byte request header.
pub fn parse_header(buf: &[u8]) -> Option<InHeader> {
    let mut r = Reader::new(buf);
    Some(InHeader {
        len: r.u32()?,
        opcode: r.u32()?,
        unique: r.u64()?,
        nodeid: r.u64()?,
        uid: r.u32()?,
        gid: r.u32()?,
        pid: r.u32()?,
    })
}

/// Little-endian writer for reply bodies.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// Append a u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Append a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Append a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Append zero bytes.
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

/// Attributes as `struct fuse_attr` wants them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Attr {
    /// Inode.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Seconds for atime/mtime/ctime.
    pub time: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u32,
}

impl Attr {
    /// Encode `struct fuse_attr` (88 bytes).
    pub fn encode(&self, w: &mut Writer) {
        w.u64(self.ino)
            .u64(self.size)
            // st_blocks: none, as sysfs, debugfs and tracefs files have none
            .u64(0)
            .u64(self.time)
            .u64(self.time)
            .u64(self.time)
            .u32(0)
            .u32(0)
            .u32(0)
            .u32(self.mode)
            .u32(self.nlink)
            .u32(self.uid)
            .u32(self.gid)
            .u32(self.rdev)
            .u32(4096)
            .u32(0);
    }
}

/// `struct fuse_entry_out` (128 bytes).
pub fn entry_out(attr: &Attr, valid_secs: u64) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(attr.ino)
        .u64(0)
        .u64(valid_secs)
        .u64(valid_secs)
        .u32(0)
        .u32(0);
    attr.encode(&mut w);
    w.0
}

/// `struct fuse_attr_out` (104 bytes).
pub fn attr_out(attr: &Attr, valid_secs: u64) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(valid_secs).u32(0).u32(0);
    attr.encode(&mut w);
    w.0
}

/// `struct fuse_open_out`.
pub fn open_out(fh: u64, open_flags: u32) -> Vec<u8> {
    let mut w = Writer::default();
    w.u64(fh).u32(open_flags).u32(0);
    w.0
}

/// Append one `struct fuse_dirent` (8-byte aligned) to a READDIR reply.
/// Returns false (and appends nothing) when it would exceed `max`.
pub fn push_dirent(
    buf: &mut Vec<u8>,
    max: usize,
    ino: u64,
    off: u64,
    typ: u32,
    name: &str,
) -> bool {
    let name = crate::base::bytestr::bytes(name);
    let len = 24 + name.len();
    let padded = len.div_ceil(8) * 8;
    if buf.len() + padded > max {
        return false;
    }
    let mut w = Writer(std::mem::take(buf));
    w.u64(ino).u64(off).u32(name.len() as u32).u32(typ);
    w.0.extend_from_slice(&name);
    w.zeros(padded - len);
    *buf = w.0;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_types_name_opcodes_and_ioctl_commands() {
        let mut ioctl_in = vec![0u8; 32];
        // MON_IOCX_MFETCH on a 64-bit caller, then MON_IOCH_MFLUSH.
        ioctl_in[12..16].copy_from_slice(&0xc010_9207u32.to_le_bytes());
        let k = request_key(op::IOCTL, &ioctl_in);
        assert_eq!(request_label(k), "IOCTL:_IOWR(0x92,7,16)");
        ioctl_in[12..16].copy_from_slice(&0x0000_9208u32.to_le_bytes());
        let k2 = request_key(op::IOCTL, &ioctl_in);
        assert_ne!(k, k2);
        assert_eq!(request_label(k2), "IOCTL:_IO(0x92,8)");
        assert_eq!(
            request_label(request_key(op::IOCTL, &[0; 4])),
            "IOCTL:_IO(0x0,0)"
        );
        assert_eq!(request_label(request_key(op::READ, &ioctl_in)), "READ");
        assert_eq!(request_label(request_key(4096, &[])), "CUSE_INIT");
        assert_eq!(request_label(request_key(999, &[])), "OPCODE_999");
    }

    #[test]
    fn struct_sizes() {
        let a = Attr::default();
        let mut w = Writer::default();
        a.encode(&mut w);
        assert_eq!(w.0.len(), 88);
        assert_eq!(entry_out(&a, 1).len(), 128);
        assert_eq!(attr_out(&a, 1).len(), 104);
        assert_eq!(open_out(1, 0).len(), 16);
    }

    #[test]
    fn dirent_alignment() {
        let mut b = Vec::new();
        assert!(push_dirent(&mut b, 4096, 5, 1, 8, "1u"));
        assert_eq!(b.len(), 32);
        assert!(!push_dirent(&mut b, 40, 5, 2, 8, "devices"));
    }

    #[test]
    fn header_roundtrip() {
        let mut w = Writer::default();
        w.u32(40)
            .u32(op::READ)
            .u64(7)
            .u64(1)
            .u32(0)
            .u32(0)
            .u32(1234)
            .u32(0);
        let h = parse_header(&w.0).unwrap();
        assert_eq!((h.opcode, h.unique, h.pid), (op::READ, 7, 1234));
    }
}
