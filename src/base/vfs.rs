//! The file tree: paths, node kinds and the operations an open file supports.
//!
//! Nothing here knows about FUSE. A frontend (FUSE, CUSE, or a unit test) looks
//! nodes up, opens them and calls [`OpenFile`] methods. A read or ioctl that
//! would block answers [`Errno::EAGAIN`]; the frontend then parks the request and
//! retries it when the file's [`Waker`] fires, or answers EAGAIN itself for an
//! `O_NONBLOCK` caller. A write that waits for room answers [`Written::Took`]
//! and is parked and retried the same way.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::{LockExt, RwLockExt};

/// Called by a facility when an open file may have become readable (or its
/// blocked ioctl may now complete). Must be cheap and must not block.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// Where an open file keeps the waker [`OpenFile::set_waker`] gave it.
#[derive(Default)]
pub struct WakerSlot(Mutex<Option<Waker>>);

impl WakerSlot {
    /// Keep `w` (the frontend's newest).
    pub fn set(&self, w: Waker) {
        *self.0.lock_ok() = Some(w);
    }

    /// Tell a parked reader or poller to look again (the waker is called
    /// outside the slot's lock).
    pub fn wake(&self) {
        let w = self.0.lock_ok().clone();
        if let Some(w) = w {
            w();
        }
    }
}

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// `POLLIN | POLLRDNORM`.
pub const POLL_READABLE: u32 = (libc::POLLIN | libc::POLLRDNORM) as u32;

/// Who is calling: the frontend fills this from the request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller {
    /// Thread id of the calling thread (the FUSE request's pid).
    pub pid: u32,
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
}

/// The calling process's memory, for ioctl arguments that hold pointers.
/// FUSE files reach it with process_vm_readv/writev on the request's pid;
/// CUSE devices with the kernel's unrestricted-ioctl retry protocol.
pub trait CallerMemory {
    /// Read `len` bytes at `addr` (EFAULT if not readable).
    fn read(&self, addr: u64, len: usize) -> SysResult<Vec<u8>>;
    /// Write `data` at `addr` (EFAULT if not writable).
    fn write(&self, addr: u64, data: &[u8]) -> SysResult<()>;
}

/// The caller memory an ioctl reads and writes, declared before it runs (for
/// CUSE, whose kernel side copies exactly these ranges).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoctlLayout {
    /// Ranges (address, length) read, in order; the first is the argument
    /// struct itself.
    pub input: Vec<(u64, u64)>,
    /// Ranges written, in order.
    pub output: Vec<(u64, u64)>,
}

/// An ioctl as the frontend received it.
#[derive(Clone)]
pub struct IoctlRequest<'a> {
    /// The command number.
    pub cmd: u32,
    /// The raw argument (a pointer or, for `_IO` commands, a value).
    pub arg: u64,
    /// `_IOC_SIZE(cmd)` bytes copied from `arg` for `_IOW`/`_IOWR` commands.
    pub input: &'a [u8],
    /// How many bytes the kernel will copy back to `arg` (`_IOR`/`_IOWR`).
    pub out_size: u32,
    /// Whether the caller's file is non-blocking.
    pub nonblock: bool,
    /// The caller.
    pub caller: Caller,
    /// False on the first attempt; true when a parked (blocked) call is retried.
    pub retry: bool,
    /// Device and inode number the caller sees for this open file (to find its
    /// mappings in `/proc/<pid>/maps`).
    pub file_id: (u64, u64),
    /// The caller's memory, for pointers inside the argument.
    pub mem: &'a dyn CallerMemory,
    /// A 32-bit caller on a 64-bit kernel (`FUSE_IOCTL_COMPAT`): pointers in
    /// argument structs are 4 bytes, and commands carry the 32-bit sizes.
    pub compat: bool,
}

impl IoctlRequest<'_> {
    /// The first `len` bytes the argument points at: what the kernel
    /// copied in, else read from the caller (a `_IOR` command's input, a
    /// FUSE file's command of no size).
    pub fn argument(&self, len: usize) -> SysResult<Vec<u8>> {
        if self.input.len() >= len {
            return Ok(self.input[..len].to_vec());
        }
        self.mem.read(self.arg, len)
    }
}

/// A successful ioctl: the return value and the bytes to copy back to `arg`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoctlReply {
    /// The syscall's return value.
    pub result: i32,
    /// Bytes for the kernel to copy to the caller's `arg` (at most `out_size`).
    pub output: Vec<u8>,
    /// Page-cache contents to update (offset, bytes) before the reply goes out,
    /// so that a mapping of the file shows them.
    pub cache_updates: Vec<(u64, Vec<u8>)>,
}

impl IoctlReply {
    /// Return value `result`, `output` for the caller's `arg`.
    pub fn new(output: Vec<u8>, result: i32) -> IoctlReply {
        IoctlReply {
            result,
            output,
            ..Default::default()
        }
    }

    /// `bytes` cut to the caller's `size`, the length copied the return
    /// value (`bits_to_user` and the like).
    pub fn cut(mut bytes: Vec<u8>, size: usize) -> IoctlReply {
        bytes.truncate(size);
        let n = bytes.len() as i32;
        IoctlReply::new(bytes, n)
    }

    /// A string as the kernel hands one out (`str_to_user`, hidraw's
    /// name ioctls): its bytes and NUL, cut to `size`; the length copied.
    pub fn string(s: &str, size: usize) -> IoctlReply {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        IoctlReply::cut(b, size)
    }
}

/// A write(2) as the frontend passes it to [`OpenFile::write_as`], once
/// or, while it waits for room, again each time the file's [`Waker`]
/// fires.
#[derive(Clone, Copy)]
pub struct WriteRequest<'a> {
    /// The file offset.
    pub offset: u64,
    /// All the bytes of the request (at most the frontend's largest write).
    pub data: &'a [u8],
    /// How many of them earlier attempts took: this one starts at
    /// `data[done..]`.
    pub done: usize,
    /// The caller (the thread that made the write(2)).
    pub caller: &'a Caller,
}

/// What [`OpenFile::write_as`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// The write is over: write(2) returns this count.
    Done(u32),
    /// It took this many more bytes (maybe none) and the rest waits for
    /// room, as a blocking write to a tty or a pipe does: the frontend
    /// waits for the waker and asks again, answers an `O_NONBLOCK` caller
    /// the bytes taken so far (EAGAIN if none), and answers an interrupted
    /// write (a signal) or a failed one the bytes taken so far, the error
    /// (EINTR) only if none.
    Took(u32),
}

/// Operations on an open file. Default methods give the errno a kernel file
/// without that operation gives.
pub trait OpenFile: Send + Sync {
    /// Read up to `size` bytes at `offset`. Blocking files answer EAGAIN when
    /// nothing is available (the frontend decides whether to wait).
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>>;
    /// [`OpenFile::read`] as the frontend makes it: `nonblock` is the
    /// caller's O_NONBLOCK, `retry` whether a parked read is tried again.
    /// Files whose reads keep state while they wait (a tty's VMIN and
    /// VTIME) tell a new read from a retried one by it.
    fn read_as(&self, offset: u64, size: u32, _nonblock: bool, _retry: bool) -> SysResult<Vec<u8>> {
        self.read(offset, size)
    }
    /// Write `data` at `offset` on behalf of `caller` (the thread that
    /// made the write(2); user_events records it); returns the bytes
    /// consumed.
    fn write(&self, _offset: u64, _data: &[u8], _caller: &Caller) -> SysResult<u32> {
        Err(Errno::EINVAL)
    }
    /// [`OpenFile::write`] as the frontend makes it (see [`WriteRequest`]):
    /// a file whose writes wait for room (a tty) answers [`Written::Took`];
    /// the default is [`OpenFile::write`]'s answer, final (its EAGAIN too).
    fn write_as(&self, w: &WriteRequest<'_>) -> SysResult<Written> {
        match self.write(w.offset, w.data, w.caller) {
            Ok(n) => Ok(Written::Done(n)),
            Err(e) if e == Errno::EAGAIN => Err(Errno::EAGAIN_FINAL),
            Err(e) => Err(e),
        }
    }
    /// `O_TRUNC` or `truncate(0)` on an open file.
    fn truncate(&self) -> SysResult<()> {
        Ok(())
    }
    /// An ioctl. EAGAIN means "would block" as for read.
    fn ioctl(&self, _req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        Err(Errno::ENOTTY)
    }
    /// Whether 32-bit (compat) callers get an answer; without it they get
    /// ENOTTY, as from a kernel file with no `compat_ioctl`.
    fn compat_ioctl(&self) -> bool {
        false
    }
    /// The memory ioctl `cmd` with argument `arg` touches, given the bytes of
    /// the argument struct fetched so far (empty at first), for a 32-bit caller
    /// if `compat`. Only CUSE asks.
    fn ioctl_layout(&self, _cmd: u32, _arg: u64, _input: &[u8], _compat: bool) -> IoctlLayout {
        IoctlLayout::default()
    }
    /// The poll mask right now.
    fn poll(&self) -> u32 {
        POLL_READABLE
    }
    /// Install the waker that readiness changes call. Files that never block
    /// ignore it.
    fn set_waker(&self, _waker: Waker) {}
    /// Whether reads stream (no offsets, direct I/O, size 0).
    fn is_stream(&self) -> bool {
        false
    }
    /// Fill the page cache: the file's bytes at `offset` as a mapping sees
    /// them, for process `pid`. The page cache is filled for a mapping's page
    /// faults, and also for splice and sendfile (which FUSE always serves
    /// from the page cache), so a file whose mapping differs from its read(2)
    /// stream must tell the two apart (by whether `pid` maps it). Only files
    /// that can be mapped or spliced implement it.
    fn read_mapped(&self, _pid: u32, _offset: u64, _size: u32) -> SysResult<Vec<u8>> {
        Err(Errno::ENODEV)
    }
    /// The device and inode number under which the caller's mapping of
    /// this open file appears in `/proc/<pid>/maps`, told before each
    /// [`OpenFile::read_mapped`] (a file whose mapping is a state, as
    /// tracefs's mapped ring, finds with it whether it is still mapped).
    fn mapped_as(&self, _file_id: (u64, u64)) {}
    /// The whole content, for files whose bytes are fixed at open (snapshots).
    /// The FUSE layer puts it in the page cache, because sendfile and splice
    /// (busybox `cat`) read through the page cache up to the inode's size and
    /// never send a read(2).
    fn content(&self) -> Option<&[u8]> {
        None
    }
    /// The last close of this open file.
    fn release(&self) {}
}

/// How an open should be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFlags {
    /// The open(2) flags.
    pub flags: i32,
}

impl OpenFlags {
    /// Opened for writing (O_WRONLY or O_RDWR).
    pub fn writable(&self) -> bool {
        self.flags & libc::O_ACCMODE != libc::O_RDONLY
    }
    /// Opened for reading.
    pub fn readable(&self) -> bool {
        self.flags & libc::O_ACCMODE != libc::O_WRONLY
    }
    /// O_TRUNC was given.
    pub fn truncate(&self) -> bool {
        self.flags & libc::O_TRUNC != 0
    }
    /// O_NONBLOCK was given.
    pub fn nonblock(&self) -> bool {
        self.flags & libc::O_NONBLOCK != 0
    }
}

/// Serves minor `N` of a class of character devices: the node behind it.
pub type MinorNode = Arc<dyn Fn(u32) -> Arc<dyn FileNode> + Send + Sync>;

/// Makes real character devices of a facility's nodes (CUSE), for the
/// classes whose nodes come and go with their devices (hidraw): a major
/// reserved per class for the daemon's life, and a device per minor made
/// at its first use and kept (its node answers for whatever device has the
/// minor at each open).
pub trait CharDevices: Send + Sync {
    /// Reserve a major for `class`, whose minor N `node(N)` serves; None if
    /// no character device can be made.
    fn reserve(&self, class: &str, node: MinorNode) -> Option<u32>;
    /// Make sure device `major:minor` of a reserved major exists (made now,
    /// or before); whether it can be opened.
    fn ensure(&self, major: u32, minor: u32) -> bool;
}

/// A file in the tree: knows its mode and how to open it.
pub trait FileNode: Send + Sync {
    /// Open the file.
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>>;
    /// Whether every open needs an inode (and so a page cache) of its own, for
    /// files whose mappings show per-open state (usbmon's ring).
    fn private_inode(&self) -> bool {
        false
    }
    /// The size `stat` reports (and up to which a mapping may fault pages in).
    fn size(&self) -> u64 {
        0
    }
}

/// What a node is.
#[derive(Clone)]
pub enum NodeKind {
    /// A directory (mode 0755 unless given).
    Dir,
    /// A symbolic link with its target.
    Symlink(String),
    /// A regular file.
    File(Arc<dyn FileNode>),
}

/// One node of the tree.
#[derive(Clone)]
pub struct Node {
    /// Inode number.
    pub ino: u64,
    /// Parent inode.
    pub parent: u64,
    /// Name within the parent.
    pub name: String,
    /// What it is.
    pub kind: NodeKind,
    /// Children in insertion order (directories).
    pub children: Vec<(String, u64)>,
    /// Permission bits.
    pub perm: u32,
    /// Added while mounted, so it may go away while mounted (user events,
    /// dynamic event systems): the frontend lets the kernel cache its entry
    /// for no time at all. An event deleted and registered again under the
    /// same name is then found at once, even before the invalidation of the
    /// old entry (sent from another thread) reaches the kernel.
    pub transient: bool,
    /// Below an eventfs directory (tracefs's `events/`), whose directories
    /// have a link count of 1; elsewhere (kernfs, tracefs, debugfs) a
    /// directory has 2 and one more per subdirectory. Inherited from the
    /// parent.
    pub eventfs: bool,
}

impl Node {
    /// The `S_IFMT` bits plus permissions.
    pub fn st_mode(&self) -> u32 {
        let fmt = match self.kind {
            NodeKind::Dir => libc::S_IFDIR,
            NodeKind::Symlink(_) => libc::S_IFLNK,
            NodeKind::File(_) => libc::S_IFREG,
        };
        fmt | self.perm
    }
}

/// Updates the kernel's caches of the mount: a file's page cache, so that
/// mappings of it show new bytes (FUSE_NOTIFY_STORE), and directory entries,
/// so that a removed node is gone at once rather than when the entry times
/// out (FUSE_NOTIFY_INVAL_ENTRY). The frontend provides it; the tree and
/// facilities whose files are mapped (the user_events status page) call it.
/// Asynchronous: updates are queued and sent from a thread that serves no
/// request (the kernel may need a request answered before it takes one).
pub trait KernelCache: Send + Sync {
    /// Put `bytes` at `offset` into the page cache of inode `ino`.
    fn store(&self, ino: u64, offset: u64, bytes: Vec<u8>);
    /// Forget the entry `name` of directory `parent`.
    fn inval_entry(&self, parent: u64, name: &str);
}

/// What `mkdir` and `rmdir` do in a directory that takes them (tracefs's
/// `instances/`). Everywhere else both answer EPERM, as tracefs does.
pub trait DirOps: Send + Sync {
    /// Make `name`: add its node (and whatever is under it) to the tree.
    fn mkdir(&self, name: &str, caller: &Caller) -> SysResult<()>;
    /// Remove `name`; `busy` says whether a file under it is open.
    fn rmdir(&self, name: &str, busy: bool, caller: &Caller) -> SysResult<()>;
}

/// What a facility or producer does around each request on the mount
/// (see [`Tree::add_request_hooks`]).
pub trait RequestHooks: Send + Sync {
    /// Before an open, read or write is served: take in what happened
    /// outside the mount, so that the request sees every event its caller
    /// could have caused or waited for before making it.
    fn before(&self) {}
    /// After an open or write was served: act on what it may have changed
    /// (a reader attached, an event enabled).
    fn after(&self) {}
}

/// The tree. Nodes can be added and removed while mounted.
pub struct Tree {
    inner: RwLock<TreeInner>,
    kernel_cache: std::sync::OnceLock<Arc<dyn KernelCache>>,
    /// Directories whose `mkdir`/`rmdir` go to a handler, by inode.
    dir_ops: RwLock<HashMap<u64, Arc<dyn DirOps>>>,
    /// Open files by inode (the frontend counts opens and releases).
    open: Mutex<HashMap<u64, usize>>,
    /// Run around requests (see [`Tree::add_request_hooks`]).
    hooks: RwLock<Vec<Arc<dyn RequestHooks>>>,
    /// Owner of every node.
    pub uid: u32,
    /// Group of every node.
    pub gid: u32,
}

struct TreeInner {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// A frontend serves the tree: nodes added from now on are transient.
    mounted: bool,
}

impl Tree {
    /// An empty tree (just the root), owned by `uid:gid`.
    pub fn new(uid: u32, gid: u32) -> Tree {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_INO,
            Node {
                ino: ROOT_INO,
                parent: ROOT_INO,
                name: String::new(),
                kind: NodeKind::Dir,
                children: Vec::new(),
                perm: 0o755,
                transient: false,
                eventfs: false,
            },
        );
        Tree {
            inner: RwLock::new(TreeInner {
                nodes,
                next_ino: ROOT_INO + 1,
                mounted: false,
            }),
            kernel_cache: std::sync::OnceLock::new(),
            dir_ops: RwLock::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
            hooks: RwLock::new(Vec::new()),
            uid,
            gid,
        }
    }

    /// Add hooks that the frontend runs around requests: [`Tree::before_request`]
    /// before each open, read and write, [`Tree::after_request`] after each
    /// open and write.
    pub fn add_request_hooks(&self, h: Arc<dyn RequestHooks>) {
        self.hooks.write_ok().push(h);
    }

    /// Run every [`RequestHooks::before`].
    pub fn before_request(&self) {
        for h in self.hooks.read_ok().iter() {
            h.before();
        }
    }

    /// Run every [`RequestHooks::after`].
    pub fn after_request(&self) {
        for h in self.hooks.read_ok().iter() {
            h.after();
        }
    }

    /// Install the frontend's cache updater (once, at mount).
    pub fn set_kernel_cache(&self, kc: Arc<dyn KernelCache>) {
        let _ = self.kernel_cache.set(kc);
        self.inner.write_ok().mounted = true;
    }

    /// Update the page cache of `ino`, if a frontend with a page cache is
    /// attached (CUSE and unit tests have none; then this does nothing).
    pub fn store(&self, ino: u64, offset: u64, bytes: Vec<u8>) {
        if let Some(kc) = self.kernel_cache.get() {
            kc.store(ino, offset, bytes);
        }
    }

    /// Add a node under the directory at `parent_path` ("" is the root),
    /// creating missing directories. Returns its inode. Replaces an existing node
    /// of the same name.
    pub fn add(&self, path: &str, kind: NodeKind, perm: u32) -> u64 {
        let mut inner = self.inner.write_ok();
        let mut parent = ROOT_INO;
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let (last, dirs) = parts.split_last().expect("non-empty path");
        for d in dirs {
            parent = match inner.child(parent, d) {
                Some(ino) => ino,
                None => inner.insert(parent, d, NodeKind::Dir, 0o755),
            };
        }
        let replaced = inner
            .child(parent, last)
            .map(|old| inner.remove(old))
            .is_some();
        let ino = inner.insert(parent, last, kind, perm);
        drop(inner);
        if replaced {
            // The kernel may hold the old node's entry.
            if let Some(kc) = self.kernel_cache.get() {
                kc.inval_entry(parent, last);
            }
        }
        ino
    }

    /// Put a file or symlink at `path` as [`Tree::add`] does, but keep the
    /// inode of a file or symlink already there (sysfs refreshing an
    /// attribute): a caller that looked the old one up just before still
    /// opens or reads it, instead of finding a removed inode (ENOENT). A
    /// symlink whose target is unchanged is left alone.
    pub fn set(&self, path: &str, kind: NodeKind, perm: u32) -> u64 {
        {
            let mut inner = self.inner.write_ok();
            if let Some(ino) = inner.resolve(path) {
                let same_target = |n: &Node| match (&n.kind, &kind) {
                    (NodeKind::Symlink(a), NodeKind::Symlink(b)) => Some(a == b),
                    (NodeKind::File(_), NodeKind::File(_)) => Some(false),
                    _ => None,
                };
                match inner.nodes.get(&ino).and_then(same_target) {
                    Some(true) => return ino,
                    Some(false) => {
                        let n = inner.nodes.get_mut(&ino).expect("resolved");
                        n.kind = kind;
                        n.perm = perm;
                        let (parent, name) = (n.parent, n.name.clone());
                        drop(inner);
                        // Its attributes (size, mode) may have changed.
                        if let Some(kc) = self.kernel_cache.get() {
                            kc.inval_entry(parent, &name);
                        }
                        return ino;
                    }
                    None => {}
                }
            }
        }
        self.add(path, kind, perm)
    }

    /// Add a directory at `path` the way eventfs adds an event's directory:
    /// a file of the same name already there (a system's `enable` or
    /// `filter` when an event is named so) stays, listed beside it, and
    /// comes back when the directory is removed; lookups find the directory
    /// (Linux 6.18 resolves `events/SYS/enable` to an event named `enable`).
    /// Any other node of the name is replaced, as by [`Tree::add`].
    pub fn add_dir_over_file(&self, path: &str) -> u64 {
        let (parent_path, name) = path.rsplit_once('/').unwrap_or(("", path));
        let shadows_file = self
            .resolve(path)
            .is_ok_and(|n| matches!(n.kind, NodeKind::File(_)));
        if !shadows_file {
            return self.add(path, NodeKind::Dir, 0o755);
        }
        let mut inner = self.inner.write_ok();
        let Some(parent) = inner.resolve(parent_path) else {
            drop(inner);
            return self.add(path, NodeKind::Dir, 0o755);
        };
        let ino = inner.insert(parent, name, NodeKind::Dir, 0o755);
        drop(inner);
        // The kernel may hold the file's entry.
        if let Some(kc) = self.kernel_cache.get() {
            kc.inval_entry(parent, name);
        }
        ino
    }

    /// Remove the node at `path` and everything below it. Returns whether it
    /// existed.
    pub fn remove(&self, path: &str) -> bool {
        let mut inner = self.inner.write_ok();
        let entry = match inner.resolve(path) {
            Some(ino) if ino != ROOT_INO => {
                let n = &inner.nodes[&ino];
                let entry = (n.parent, n.name.clone());
                inner.remove(ino);
                entry
            }
            _ => return false,
        };
        drop(inner);
        if let Some(kc) = self.kernel_cache.get() {
            kc.inval_entry(entry.0, &entry.1);
        }
        true
    }

    /// Remove the children of directory `dir` named in `names` (with what
    /// is under them; the one [`Tree::remove`] would take where two share
    /// a name), in one pass over the directory: removing many
    /// entries of a large directory costs its size once, not once per
    /// entry. Returns how many went.
    pub fn remove_children(&self, dir: &str, names: &HashSet<&str>) -> usize {
        let mut inner = self.inner.write_ok();
        let Some(parent) = inner.resolve(dir) else {
            return 0;
        };
        let Some(p) = inner.nodes.get_mut(&parent) else {
            return 0;
        };
        // The child each name resolves to: of two of the same name (a
        // directory over a file, see `add_dir_over_file`), the last added,
        // as `remove` takes.
        let mut seen = HashSet::new();
        let gone: Vec<(String, u64)> = p
            .children
            .iter()
            .rev()
            .filter(|(n, _)| names.contains(n.as_str()) && seen.insert(n.as_str()))
            .map(|(n, i)| (n.clone(), *i))
            .collect();
        let inos: HashSet<u64> = gone.iter().map(|g| g.1).collect();
        p.children.retain(|(_, i)| !inos.contains(i));
        for (_, ino) in &gone {
            // Already out of the parent's list: take the subtree only.
            if let Some(node) = inner.nodes.remove(ino) {
                let mut stack: Vec<u64> = node.children.iter().map(|c| c.1).collect();
                while let Some(i) = stack.pop() {
                    if let Some(n) = inner.nodes.remove(&i) {
                        stack.extend(n.children.iter().map(|c| c.1));
                    }
                }
            }
        }
        drop(inner);
        if let Some(kc) = self.kernel_cache.get() {
            for (name, _) in &gone {
                kc.inval_entry(parent, name);
            }
        }
        gone.len()
    }

    /// Make the directory at `path` an eventfs directory (see
    /// [`Node::eventfs`]): it and what is added below it from now on.
    pub fn mark_eventfs(&self, path: &str) {
        let mut inner = self.inner.write_ok();
        if let Some(ino) = inner.resolve(path) {
            if let Some(n) = inner.nodes.get_mut(&ino) {
                n.eventfs = true;
            }
        }
    }

    /// A node's link count as stat gives it: a file or link 1; a directory
    /// 2 and one per subdirectory, or 1 below eventfs.
    pub fn nlink(&self, node: &Node) -> u32 {
        if !matches!(node.kind, NodeKind::Dir) {
            return 1;
        }
        if node.eventfs {
            return 1;
        }
        let inner = self.inner.read_ok();
        let subdirs = node
            .children
            .iter()
            .filter(|(_, i)| {
                inner
                    .nodes
                    .get(i)
                    .is_some_and(|n| matches!(n.kind, NodeKind::Dir))
            })
            .count();
        2 + subdirs as u32
    }

    /// Whether the directory at `path` has a subdirectory (without copying
    /// its list of children).
    pub fn has_subdir(&self, path: &str) -> bool {
        let inner = self.inner.read_ok();
        let Some(ino) = inner.resolve(path) else {
            return false;
        };
        inner.nodes[&ino].children.iter().any(|(_, i)| {
            inner
                .nodes
                .get(i)
                .is_some_and(|n| matches!(n.kind, NodeKind::Dir))
        })
    }

    /// Send `mkdir` and `rmdir` in the directory at `path` to `ops`.
    pub fn set_dir_ops(&self, path: &str, ops: Arc<dyn DirOps>) {
        if let Ok(n) = self.resolve(path) {
            self.dir_ops.write_ok().insert(n.ino, ops);
        }
    }

    /// `mkdir name` in directory `parent`: the node the handler made, EEXIST
    /// for a name in use, EPERM where no handler takes it.
    pub fn mkdir(&self, parent: u64, name: &str, caller: &Caller) -> SysResult<Node> {
        let ops = self.dir_ops.read_ok().get(&parent).cloned();
        let Some(ops) = ops else {
            return Err(match self.lookup(parent, name) {
                Ok(_) => Errno::EEXIST,
                Err(_) => Errno::EPERM,
            });
        };
        if self.lookup(parent, name).is_ok() {
            return Err(Errno::EEXIST);
        }
        ops.mkdir(name, caller)?;
        self.lookup(parent, name)
    }

    /// `rmdir name` in directory `parent`: ENOENT for no such entry, EPERM
    /// where no handler takes it; the handler decides the rest.
    pub fn rmdir(&self, parent: u64, name: &str, caller: &Caller) -> SysResult<()> {
        let node = self.lookup(parent, name)?;
        let ops = self.dir_ops.read_ok().get(&parent).cloned();
        let Some(ops) = ops else {
            return Err(Errno::EPERM);
        };
        let busy = self.busy(node.ino);
        ops.rmdir(name, busy, caller)
    }

    /// Count an open of `ino` (the frontend calls it).
    pub fn note_open(&self, ino: u64) {
        *self.open.lock_ok().entry(ino).or_default() += 1;
    }

    /// Count a release of `ino` (the frontend calls it).
    pub fn note_release(&self, ino: u64) {
        let mut open = self.open.lock_ok();
        if let Some(n) = open.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ino);
            }
        }
    }

    /// Whether a file at or under `ino` is open.
    fn busy(&self, ino: u64) -> bool {
        let open = self.open.lock_ok();
        if open.is_empty() {
            return false;
        }
        let inner = self.inner.read_ok();
        let mut stack = vec![ino];
        while let Some(i) = stack.pop() {
            if open.contains_key(&i) {
                return true;
            }
            if let Some(n) = inner.nodes.get(&i) {
                stack.extend(n.children.iter().map(|c| c.1));
            }
        }
        false
    }

    /// Look up `name` in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &str) -> SysResult<Node> {
        let inner = self.inner.read_ok();
        let p = inner.nodes.get(&parent).ok_or(Errno::ENOENT)?;
        if !matches!(p.kind, NodeKind::Dir) {
            return Err(Errno::ENOTDIR);
        }
        let ino = inner.child(parent, name).ok_or(Errno::ENOENT)?;
        Ok(inner.nodes[&ino].clone())
    }

    /// The node with inode `ino`.
    pub fn get(&self, ino: u64) -> SysResult<Node> {
        self.inner
            .read_ok()
            .nodes
            .get(&ino)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    /// The node at a slash-separated path.
    pub fn resolve(&self, path: &str) -> SysResult<Node> {
        let inner = self.inner.read_ok();
        let ino = inner.resolve(path).ok_or(Errno::ENOENT)?;
        Ok(inner.nodes[&ino].clone())
    }
}

impl TreeInner {
    /// The child called `name`; of two (a directory over a file, see
    /// [`Tree::add_dir_over_file`]) the one added last.
    fn child(&self, parent: u64, name: &str) -> Option<u64> {
        self.nodes
            .get(&parent)?
            .children
            .iter()
            .rfind(|(n, _)| n == name)
            .map(|(_, i)| *i)
    }

    fn resolve(&self, path: &str) -> Option<u64> {
        let mut ino = ROOT_INO;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            ino = self.child(ino, part)?;
        }
        Some(ino)
    }

    fn insert(&mut self, parent: u64, name: &str, kind: NodeKind, perm: u32) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let eventfs = self.nodes.get(&parent).is_some_and(|p| p.eventfs);
        self.nodes.insert(
            ino,
            Node {
                ino,
                parent,
                name: name.to_string(),
                kind,
                children: Vec::new(),
                perm,
                transient: self.mounted,
                eventfs,
            },
        );
        self.nodes
            .get_mut(&parent)
            .unwrap()
            .children
            .push((name.to_string(), ino));
        ino
    }

    fn remove(&mut self, ino: u64) {
        if let Some(node) = self.nodes.remove(&ino) {
            for (_, c) in node.children {
                self.remove(c);
            }
            if let Some(p) = self.nodes.get_mut(&node.parent) {
                p.children.retain(|(_, i)| *i != ino);
            }
        }
    }
}

/// A file whose content is produced at open time and then read by offset, like
/// the kernel's `single_open` files (`Ns`, `usb/devices`).
pub struct SnapshotFile {
    make: Box<dyn Fn() -> Vec<u8> + Send + Sync>,
}

impl SnapshotFile {
    /// A read-only snapshot file.
    pub fn new(make: impl Fn() -> Vec<u8> + Send + Sync + 'static) -> Self {
        SnapshotFile {
            make: Box::new(make),
        }
    }
}

/// The bytes of `data` a read of `size` bytes at `offset` returns (empty
/// past the end), as for any file read by offset.
pub fn slice_at(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data[start..end].to_vec()
}

/// The text of a generated file (a tracefs control file) for one open, as a
/// seq_file keeps it: made at open, made again when a later read starts at
/// offset 0 or after a write through this open. The text made at open is
/// also the open's [`OpenFile::content`], so that sendfile and splice
/// (busybox `cat`) see it.
pub struct OpenText {
    at_open: Vec<u8>,
    state: Mutex<TextState>,
}

#[derive(Default)]
struct TextState {
    /// Text made after open; reads use `at_open` until there is one.
    fresh: Option<Vec<u8>>,
    /// What `at_open` and `fresh` hold of [`crate::base::budget::OPEN_TEXT`].
    grant: Option<crate::base::budget::Grant>,
    /// A read has happened.
    read: bool,
    /// A write happened: the next read makes the text again, even where it
    /// continues a previous one.
    stale: bool,
}

impl OpenText {
    /// Text for an open; `initial` is the file's text now. ENOMEM when the
    /// text held by all open files would pass [`crate::base::budget::OPEN_TEXT`].
    pub fn new(mut initial: Vec<u8>) -> SysResult<OpenText> {
        // Held as long as the open: no spare capacity (issue 37).
        initial.shrink_to_fit();
        let grant = crate::base::budget::OPEN_TEXT.take(initial.len())?;
        Ok(OpenText {
            at_open: initial,
            state: Mutex::new(TextState {
                grant: Some(grant),
                ..Default::default()
            }),
        })
    }

    /// Text for an open of a file whose sendfile view is not this text (it
    /// has no [`OpenFile::content`]): nothing is made at open, the first
    /// read makes it.
    pub fn lazy() -> OpenText {
        OpenText {
            at_open: Vec::new(),
            state: Mutex::new(TextState {
                stale: true,
                ..Default::default()
            }),
        }
    }

    /// A read at `offset`: the first read and reads continuing it use the
    /// text made at open; a read from offset 0 after that (or any read after
    /// a write) uses `generate()`'s fresh text.
    /// ENOMEM (and nothing changed) when the fresh text would pass the
    /// budget of text held by open files.
    pub fn read(
        &self,
        offset: u64,
        size: u32,
        generate: impl FnOnce() -> Vec<u8>,
    ) -> SysResult<Vec<u8>> {
        let mut st = self.state.lock_ok();
        if st.stale || (offset == 0 && st.read) {
            let mut text = generate();
            text.shrink_to_fit();
            let held = self.at_open.len() + text.len();
            match st.grant.as_mut() {
                Some(g) => g.resize(held)?,
                None => st.grant = Some(crate::base::budget::OPEN_TEXT.take(held)?),
            }
            st.fresh = Some(text);
        }
        st.read = true;
        st.stale = false;
        Ok(slice_at(
            st.fresh.as_deref().unwrap_or(&self.at_open),
            offset,
            size,
        ))
    }

    /// A write went through this open.
    pub fn written(&self) {
        self.state.lock_ok().stale = true;
    }

    /// The text made at open.
    pub fn at_open(&self) -> &[u8] {
        &self.at_open
    }
}

struct Snapshot {
    text: Vec<u8>,
    /// Its share of [`crate::base::budget::OPEN_TEXT`].
    _grant: crate::base::budget::Grant,
}

impl OpenFile for Snapshot {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        Ok(slice_at(&self.text, offset, size))
    }
    fn read_mapped(&self, _pid: u32, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.read(offset, size)
    }
    fn content(&self) -> Option<&[u8]> {
        Some(&self.text)
    }
}

impl FileNode for SnapshotFile {
    fn open(&self, flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        if flags.writable() {
            return Err(Errno::EACCES);
        }
        let mut text = (self.make)();
        text.shrink_to_fit();
        let grant = crate::base::budget::OPEN_TEXT.take(text.len())?;
        Ok(Arc::new(Snapshot {
            text,
            _grant: grant,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_count_their_subdirectories_but_under_eventfs() {
        let t = Tree::new(0, 0);
        t.add("d", NodeKind::Dir, 0o755);
        t.add("d/a", NodeKind::Dir, 0o755);
        t.add("d/b", NodeKind::Dir, 0o755);
        let file = NodeKind::File(Arc::new(SnapshotFile::new(Vec::new)));
        t.add("d/f", file.clone(), 0o644);
        let nlink = |p: &str| t.nlink(&t.resolve(p).unwrap());
        assert_eq!(nlink("d"), 4);
        assert_eq!(nlink("d/a"), 2);
        assert_eq!(nlink("d/f"), 1);
        t.add("e", NodeKind::Dir, 0o755);
        t.mark_eventfs("e");
        t.add("e/sched", NodeKind::Dir, 0o755);
        t.add("e/sched/x", NodeKind::Dir, 0o755);
        assert_eq!(nlink("e"), 1);
        assert_eq!(nlink("e/sched"), 1);
        assert_eq!(nlink("e/sched/x"), 1);
    }

    #[test]
    fn children_go_in_one_pass_and_shadowed_files_stay() {
        let t = Tree::new(0, 0);
        t.add("d", NodeKind::Dir, 0o755);
        let file = NodeKind::File(Arc::new(SnapshotFile::new(Vec::new)));
        let first = t.add("d/enable", file, 0o644);
        for i in 0..1000 {
            t.add(&format!("d/e{i}"), NodeKind::Dir, 0o755);
            t.add(&format!("d/e{i}/id"), NodeKind::Dir, 0o755);
        }
        let before = t.inner.read_ok().nodes.len();
        let names: HashSet<&str> = ["e1", "e999", "nope"].into_iter().collect();
        assert_eq!(t.remove_children("d", &names), 2);
        assert_eq!(t.inner.read_ok().nodes.len(), before - 4, "subtrees too");
        assert!(t.resolve("d/e1").is_err());
        assert!(t.resolve("d/e2/id").is_ok());
        assert!(t.has_subdir("d"));
        // Two of one name (a directory over a file): the last added goes.
        let over = t.add_dir_over_file("d/enable");
        assert_ne!(over, first);
        let names: HashSet<&str> = ["enable"].into_iter().collect();
        assert_eq!(t.remove_children("d", &names), 1);
        assert_eq!(t.resolve("d/enable").map(|n| n.ino), Ok(first));
    }

    #[test]
    fn open_text_is_made_at_open_and_again_from_offset_0() {
        let n = std::cell::Cell::new(0);
        let gen = || {
            n.set(n.get() + 1);
            format!("gen{}", n.get()).into_bytes()
        };
        let t = OpenText::new(b"open".to_vec()).unwrap();
        assert_eq!(t.at_open(), b"open");
        assert_eq!(
            t.read(0, 2, gen).unwrap(),
            b"op",
            "the first read uses the text made at open"
        );
        assert_eq!(
            t.read(2, 10, gen).unwrap(),
            b"en",
            "and so does its continuation"
        );
        assert_eq!(
            t.read(0, 10, gen).unwrap(),
            b"gen1",
            "a new read from 0 makes it again"
        );
        assert_eq!(t.read(3, 10, gen).unwrap(), b"1");
        t.written();
        assert_eq!(
            t.read(3, 10, gen).unwrap(),
            b"2",
            "after a write even a continuation"
        );
        assert_eq!(
            t.at_open(),
            b"open",
            "sendfile's text stays the one made at open"
        );
    }

    #[test]
    fn add_resolve_remove() {
        let t = Tree::new(0, 0);
        let f = Arc::new(SnapshotFile::new(|| b"hello".to_vec()));
        t.add("usb/usbmon/1u", NodeKind::File(f), 0o600);
        t.add("usbmon", NodeKind::Symlink("usb/usbmon".into()), 0o777);
        let n = t.resolve("usb/usbmon/1u").unwrap();
        assert_eq!(n.st_mode(), libc::S_IFREG | 0o600);
        let usb = t.lookup(ROOT_INO, "usb").unwrap();
        assert!(matches!(usb.kind, NodeKind::Dir));
        assert!(t.remove("usb/usbmon"));
        assert_eq!(t.resolve("usb/usbmon/1u").err(), Some(Errno::ENOENT));
        assert_eq!(t.get(n.ino).err(), Some(Errno::ENOENT));
    }

    #[test]
    fn snapshot_reads_by_offset_and_refuses_writes() {
        let f = SnapshotFile::new(|| b"abcdef".to_vec());
        let c = Caller::default();
        let o = f
            .open(
                OpenFlags {
                    flags: libc::O_RDONLY,
                },
                &c,
            )
            .unwrap();
        assert_eq!(o.read(2, 3).unwrap(), b"cde");
        assert_eq!(o.read(10, 3).unwrap(), b"");
        assert_eq!(
            f.open(
                OpenFlags {
                    flags: libc::O_WRONLY
                },
                &c
            )
            .err(),
            Some(Errno::EACCES)
        );
    }
}
