// Package loader makes the few hundred bytes that start devk's node agent
// on a node that has no image of it and no registry to pull one from
// (`--load`): a static ELF, small enough for a ConfigMap, that reads a
// program from its stdin into memory and runs it in its own place.
//
// Its stdin is an 8-byte little-endian length, that many bytes of a
// program (devk), then whatever the program itself reads. The loader
// copies the program into a memfd (memfd_create, Linux 3.17) and runs it
// with execveat(fd, "", argv, envp, AT_EMPTY_PATH) (Linux 3.19), passing
// its own arguments and environment on; the bytes after the program are
// still unread, for the program. It exits 126 if any step fails. A Go
// program could not do this from a ConfigMap, which holds at most 1 MiB:
// the smallest static one is larger.
package loader

import (
	"encoding/binary"
	"fmt"
	"io"
)

// ExitFailed is the loader's exit status when it cannot read the
// program or run it.
const ExitFailed = 126

// amd64 is the loader's code for x86-64, as GNU as assembles this
// listing (`as` then `objcopy -O binary -j .text`; TestListing checks
// the bytes against it). Registers: r14 the initial stack (argc, argv,
// envp), r12 the memfd, r13 the program bytes left, r15 and rbx a read's
// or write's place and length; the 64 KiB buffer is on the stack.
var amd64 = []byte{
	// _start:
	0x49, 0x89, 0xe6, //                   mov r14, rsp
	0xb8, 0x3f, 0x01, 0x00, 0x00, //       mov eax, 319             (memfd_create)
	0x48, 0x8d, 0x3d, 0xb8, 0x00, 0x00, 0x00, // lea rdi, [rip + name]
	0xbe, 0x01, 0x00, 0x00, 0x00, //       mov esi, 1               (MFD_CLOEXEC)
	0x0f, 0x05, //                         syscall
	0x48, 0x85, 0xc0, //                   test rax, rax
	0x0f, 0x88, 0x9c, 0x00, 0x00, 0x00, // js fail
	0x49, 0x89, 0xc4, //                   mov r12, rax
	0x48, 0x81, 0xec, 0x00, 0x00, 0x01, 0x00, // sub rsp, 65536
	0x49, 0x89, 0xe7, //                   mov r15, rsp
	0xbb, 0x08, 0x00, 0x00, 0x00, //       mov ebx, 8
	// hdr: (read the program's length)
	0x31, 0xc0, //                         xor eax, eax             (read)
	0x31, 0xff, //                         xor edi, edi             (stdin)
	0x4c, 0x89, 0xfe, //                   mov rsi, r15
	0x48, 0x89, 0xda, //                   mov rdx, rbx
	0x0f, 0x05, //                         syscall
	0x48, 0x85, 0xc0, //                   test rax, rax
	0x7e, 0x79, //                         jle fail
	0x49, 0x01, 0xc7, //                   add r15, rax
	0x48, 0x29, 0xc3, //                   sub rbx, rax
	0x75, 0xe7, //                         jnz hdr
	0x4c, 0x8b, 0x2c, 0x24, //             mov r13, [rsp]
	// copy: (at most 64 KiB at a time, never past the program)
	0x4d, 0x85, 0xed, //                   test r13, r13
	0x74, 0x45, //                         jz exec
	0x4c, 0x89, 0xea, //                   mov rdx, r13
	0xb9, 0x00, 0x00, 0x01, 0x00, //       mov ecx, 65536
	0x48, 0x39, 0xca, //                   cmp rdx, rcx
	0x48, 0x0f, 0x47, 0xd1, //             cmova rdx, rcx
	0x31, 0xc0, //                         xor eax, eax             (read)
	0x31, 0xff, //                         xor edi, edi
	0x48, 0x89, 0xe6, //                   mov rsi, rsp
	0x0f, 0x05, //                         syscall
	0x48, 0x85, 0xc0, //                   test rax, rax
	0x7e, 0x4b, //                         jle fail
	0x49, 0x29, 0xc5, //                   sub r13, rax
	0x49, 0x89, 0xe7, //                   mov r15, rsp
	0x48, 0x89, 0xc3, //                   mov rbx, rax
	// wr: (all of what was read, into the memfd)
	0xb8, 0x01, 0x00, 0x00, 0x00, //       mov eax, 1               (write)
	0x4c, 0x89, 0xe7, //                   mov rdi, r12
	0x4c, 0x89, 0xfe, //                   mov rsi, r15
	0x48, 0x89, 0xda, //                   mov rdx, rbx
	0x0f, 0x05, //                         syscall
	0x48, 0x85, 0xc0, //                   test rax, rax
	0x7e, 0x2d, //                         jle fail
	0x49, 0x01, 0xc7, //                   add r15, rax
	0x48, 0x29, 0xc3, //                   sub rbx, rax
	0x75, 0xe3, //                         jnz wr
	0xeb, 0xb6, //                         jmp copy
	// exec:
	0xb8, 0x42, 0x01, 0x00, 0x00, //       mov eax, 322             (execveat)
	0x4c, 0x89, 0xe7, //                   mov rdi, r12
	0x48, 0x8d, 0x35, 0x25, 0x00, 0x00, 0x00, // lea rsi, [rip + empty]
	0x49, 0x8d, 0x56, 0x08, //             lea rdx, [r14 + 8]       (argv)
	0x49, 0x8b, 0x0e, //                   mov rcx, [r14]           (argc)
	0x4d, 0x8d, 0x54, 0xce, 0x10, //       lea r10, [r14 + rcx*8 + 16] (envp)
	0x41, 0xb8, 0x00, 0x10, 0x00, 0x00, // mov r8d, 0x1000          (AT_EMPTY_PATH)
	0x0f, 0x05, //                         syscall
	// fail:
	0xb8, 0x3c, 0x00, 0x00, 0x00, //       mov eax, 60              (exit)
	0xbf, 0x7e, 0x00, 0x00, 0x00, //       mov edi, 126
	0x0f, 0x05, //                         syscall
	// name: .asciz "devk"
	'd', 'e', 'v', 'k', 0,
	// empty: .byte 0
	0,
}

// Where the ELF maps itself: one read-and-execute segment holding the
// headers and the code.
const (
	base       = 0x400000
	ehdrSize   = 64
	phdrSize   = 56
	codeOffset = ehdrSize + phdrSize
)

// ELF is the loader for a node of architecture arch (GOARCH's names, as
// a Node's status.nodeInfo.architecture says): a static executable of one
// segment, a function of the architecture alone.
func ELF(arch string) ([]byte, error) {
	if arch != "amd64" {
		return nil, fmt.Errorf("devk's loader runs on amd64 nodes only, not %s: push devk's agent to a registry the node pulls from (--registry)", arch)
	}
	code := amd64
	size := uint64(codeOffset + len(code))
	le := binary.LittleEndian
	out := make([]byte, 0, size)
	// ELF header: 64-bit, little-endian, version 1, System V, executable,
	// x86-64, entry at the code.
	out = append(out, 0x7f, 'E', 'L', 'F', 2, 1, 1, 0)
	out = append(out, make([]byte, 8)...)
	out = le.AppendUint16(out, 2)    // e_type ET_EXEC
	out = le.AppendUint16(out, 0x3e) // e_machine EM_X86_64
	out = le.AppendUint32(out, 1)    // e_version
	out = le.AppendUint64(out, base+codeOffset)
	out = le.AppendUint64(out, ehdrSize) // e_phoff
	out = le.AppendUint64(out, 0)        // e_shoff: no sections
	out = le.AppendUint32(out, 0)        // e_flags
	out = le.AppendUint16(out, ehdrSize)
	out = le.AppendUint16(out, phdrSize)
	out = le.AppendUint16(out, 1) // e_phnum
	out = le.AppendUint16(out, 0) // e_shentsize
	out = le.AppendUint16(out, 0) // e_shnum
	out = le.AppendUint16(out, 0) // e_shstrndx
	// Program header: PT_LOAD, read and execute, the whole file at base.
	out = le.AppendUint32(out, 1)      // p_type PT_LOAD
	out = le.AppendUint32(out, 4|1)    // p_flags R|X
	out = le.AppendUint64(out, 0)      // p_offset
	out = le.AppendUint64(out, base)   // p_vaddr
	out = le.AppendUint64(out, base)   // p_paddr
	out = le.AppendUint64(out, size)   // p_filesz
	out = le.AppendUint64(out, size)   // p_memsz
	out = le.AppendUint64(out, 0x1000) // p_align
	return append(out, code...), nil
}

// Header is what precedes a program of size bytes on the loader's stdin.
func Header(size int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(size)) }

// Send writes a program (size bytes from r) to w as the loader reads it.
func Send(w io.Writer, r io.Reader, size int64) error {
	if _, err := w.Write(Header(size)); err != nil {
		return err
	}
	n, err := io.CopyN(w, r, size)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	return err
}
