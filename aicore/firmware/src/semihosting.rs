//! Console output and exit through ARM semihosting (`hlt #0xf000`), which qemu serves with
//! `-semihosting-config enable=on,target=native`: the qemu image's only channel to the test
//! script, and its exit code.
#![allow(unsafe_code)]

const SYS_OPEN: u64 = 0x01;
const SYS_WRITE: u64 = 0x05;
const SYS_WRITE0: u64 = 0x04;
/// SYS_OPEN's mode for "wb": create or truncate, binary.
const MODE_WB: u64 = 5;
const SYS_EXIT: u64 = 0x18;
const SYS_GET_CMDLINE: u64 = 0x15;
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x20026;

/// One semihosting call: operation `op` with its parameter block at `arg`.
fn call(op: u64, arg: u64) -> u64 {
    let mut r = op;
    // SAFETY: the semihosting trap reads w0 (operation) and x1 (parameter block address),
    // returns in x0 and touches only the memory the block names, which the caller keeps alive
    // and initialised for the call.
    unsafe { core::arch::asm!("hlt #0xf000", inout("x0") r, in("x1") arg, options(nostack)) }
    r
}

/// Opens host file `name` (NUL-terminated) for binary writing; `None` if the host refused.
pub fn open_write(name: &[u8]) -> Option<u64> {
    let len = name.iter().position(|&b| b == 0)?;
    let block = [name.as_ptr() as u64, MODE_WB, len as u64];
    let handle = call(SYS_OPEN, block.as_ptr() as u64);
    (handle as i64 >= 0).then_some(handle)
}

/// Writes `bytes` to host file `handle`; returns whether all of them were written.
pub fn write(handle: u64, bytes: &[u8]) -> bool {
    let block = [handle, bytes.as_ptr() as u64, bytes.len() as u64];
    call(SYS_WRITE, block.as_ptr() as u64) == 0
}

/// The command line the debugger passes the program (qemu: the image's name, then
/// `-append`'s text), read into `buf`; `None` if the host gave none.
pub fn cmdline(buf: &mut [u8]) -> Option<&[u8]> {
    let mut block = [buf.as_mut_ptr() as u64, buf.len() as u64];
    if call(SYS_GET_CMDLINE, block.as_mut_ptr() as u64) != 0 {
        return None;
    }
    buf.get(..block[1] as usize)
}

/// Ends the program; the debugger (qemu) exits with `code`.
pub fn exit(code: u32) -> ! {
    let block = [ADP_STOPPED_APPLICATION_EXIT, code as u64];
    call(SYS_EXIT, block.as_ptr() as u64);
    crate::arch::halt()
}

/// A line-buffered console: text is collected in a small buffer and written with one
/// `SYS_WRITE0` per line or full buffer.
pub struct Console {
    buf: [u8; 128],
    len: usize,
}

impl Console {
    /// An empty console buffer.
    pub const fn new() -> Self {
        Self {
            buf: [0; 128],
            len: 0,
        }
    }

    /// Writes what is buffered.
    pub fn flush(&mut self) {
        if self.len == 0 {
            return;
        }
        let n = self.len.min(self.buf.len() - 1);
        if let Some(b) = self.buf.get_mut(n) {
            *b = 0;
        }
        call(SYS_WRITE0, self.buf.as_ptr() as u64);
        self.len = 0;
    }

    /// Buffers raw bytes (a NUL byte is written as `?`, since SYS_WRITE0 stops at one).
    pub fn write_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.len + 1 >= self.buf.len() {
                self.flush();
            }
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = if b == 0 { b'?' } else { b };
                self.len += 1;
            }
            if b == b'\n' {
                self.flush();
            }
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Write for Console {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}
