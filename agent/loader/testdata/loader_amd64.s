# The loader's x86-64 code (loader.go's amd64), as GNU as reads it; TestListing
# assembles it and compares.
	.intel_syntax noprefix
	.globl _start
_start:
	mov r14, rsp
	mov eax, 319
	lea rdi, [rip + name]
	mov esi, 1
	syscall
	test rax, rax
	js fail
	mov r12, rax
	sub rsp, 65536
	mov r15, rsp
	mov ebx, 8
hdr:
	xor eax, eax
	xor edi, edi
	mov rsi, r15
	mov rdx, rbx
	syscall
	test rax, rax
	jle fail
	add r15, rax
	sub rbx, rax
	jnz hdr
	mov r13, [rsp]
copy:
	test r13, r13
	jz exec
	mov rdx, r13
	mov ecx, 65536
	cmp rdx, rcx
	cmova rdx, rcx
	xor eax, eax
	xor edi, edi
	mov rsi, rsp
	syscall
	test rax, rax
	jle fail
	sub r13, rax
	mov r15, rsp
	mov rbx, rax
wr:
	mov eax, 1
	mov rdi, r12
	mov rsi, r15
	mov rdx, rbx
	syscall
	test rax, rax
	jle fail
	add r15, rax
	sub rbx, rax
	jnz wr
	jmp copy
exec:
	mov eax, 322
	mov rdi, r12
	lea rsi, [rip + empty]
	lea rdx, [r14 + 8]
	mov rcx, [r14]
	lea r10, [r14 + rcx*8 + 16]
	mov r8d, 0x1000
	syscall
fail:
	mov eax, 60
	mov edi, 126
	syscall
name:
	.asciz "devk"
empty:
	.byte 0
