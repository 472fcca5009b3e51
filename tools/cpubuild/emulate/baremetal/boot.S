/* A bare-metal x86_64 image for Bochs: a boot sector that loads the rest of
 * the image with BIOS int 13h (LBA), identity-maps the first GiB with 2 MiB
 * pages and enters 64-bit long mode directly from real mode; then the 64-bit
 * entry enables SSE/AVX/AVX-512/AMX state (CR4.OSFXSR/OSXMMEXCPT/OSXSAVE,
 * XCR0 = the model's CPUID.(0Dh,0) bits within 0x602e7), installs an IDT
 * whose handlers report the exception on COM1, and calls rt_start. */

#define PML4 0x1000
#define PDPT 0x2000
#define PD   0x3000

        .code16
        .section .boot, "ax"
        .globl _boot
_boot:
        cli
        ljmp $0, $1f
1:      xor %ax, %ax
        mov %ax, %ds
        mov %ax, %es
        mov %ax, %ss
        mov $0x7c00, %sp
        mov %dl, boot_drive
        mov $__load_sectors, %cx
load:   test %cx, %cx
        jz loaded
        mov %cx, %ax
        cmp $64, %ax
        jbe 2f
        mov $64, %ax
2:      mov %ax, dap_count
        push %cx
        push %ax
        mov $0x42, %ah
        mov boot_drive, %dl
        mov $dap, %si
        int $0x13
        jc disk_error
        pop %ax
        pop %cx
        sub %ax, %cx
        mov %ax, %bx
        shl $5, %bx
        add %bx, dap_seg
        add %ax, dap_lba
        jmp load
disk_error:
        mov $0x3f8, %dx
        mov $'D', %al
        out %al, %dx
        hlt
        jmp disk_error
loaded:
        cli                            /* the BIOS may have enabled interrupts */
        mov $0xff, %al                 /* mask every PIC line: no IRQ reaches long mode */
        out %al, $0x21
        out %al, $0xa1
        in $0x92, %al                  /* fast A20 */
        or $2, %al
        and $0xfe, %al
        out %al, $0x92
        mov $PML4, %di                 /* page tables: zero 3 pages */
        mov $(3 * 4096 / 4), %cx
        xor %eax, %eax
        rep stosl
        movl $(PDPT | 3), PML4
        movl $(PD | 3), PDPT
        mov $PD, %di
        mov $0x83, %eax                /* present, writable, 2 MiB page */
        mov $512, %cx
3:      mov %eax, (%di)
        add $0x200000, %eax
        add $8, %di
        loop 3b
        mov $PML4, %eax
        mov %eax, %cr3
        mov %cr4, %eax
        or $0x20, %eax                 /* PAE */
        mov %eax, %cr4
        mov $0xc0000080, %ecx          /* EFER.LME */
        rdmsr
        or $0x100, %eax
        wrmsr
        lgdtl gdt_desc
        mov %cr0, %eax
        or $0x80000001, %eax           /* PG + PE */
        mov %eax, %cr0
        ljmp $0x08, $long_entry

        .code64
long_entry:
        mov $_start64, %rax
        jmp *%rax

        .balign 8
gdt:    .quad 0
        .quad 0x00209a0000000000       /* 64-bit code */
        .quad 0x0000920000000000       /* data */
gdt_desc:
        .word gdt_desc - gdt - 1
        .long gdt
boot_drive:
        .byte 0
        .balign 4
dap:    .byte 16, 0
dap_count:
        .word 0
        .word 0                        /* offset */
dap_seg:
        .word 0x07e0                   /* 0x7e00: right after the boot sector */
dap_lba:
        .quad 1
        .org 510
        .byte 0x55, 0xaa

        .text
        .globl _start64
_start64:
        mov $0x10, %ax
        mov %ax, %ds
        mov %ax, %es
        mov %ax, %ss
        xor %ax, %ax
        mov %ax, %fs
        mov %ax, %gs
        mov $__stack_top, %rsp
        mov $__bss_start, %rdi         /* zero .bss */
        mov $__bss_end, %rcx
        sub %rdi, %rcx
        xor %eax, %eax
        rep stosb
        mov %cr0, %rax
        and $~4, %rax                  /* no EM */
        or $2, %rax                    /* MP */
        mov %rax, %cr0
        mov %cr4, %rax
        or $((1 << 9) | (1 << 10) | (1 << 18)), %rax   /* OSFXSR, OSXMMEXCPT, OSXSAVE */
        mov %rax, %cr4
        mov $0xd, %eax
        xor %ecx, %ecx
        cpuid
        and $0x602e7, %eax             /* x87 SSE AVX opmask ZMM_Hi256 Hi16_ZMM PKRU TILECFG TILEDATA */
        xor %edx, %edx
        xor %ecx, %ecx
        xsetbv
        call rt_start
4:      hlt
        jmp 4b

/* Exception stubs: push a zero error code where the CPU pushes none, then
 * the vector; rt_fault(vector, error, rip) reports it and ends the run. */
        .macro isr n
isr\n:
        .if (\n == 8) || (\n >= 10 && \n <= 14) || (\n == 17) || (\n == 21) || (\n == 29) || (\n == 30)
        .else
        push $0
        .endif
        push $\n
        jmp isr_common
        .endm
        .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        isr \n
        .endr
isr_common:
        mov (%rsp), %rdi
        mov 8(%rsp), %rsi
        mov 16(%rsp), %rdx
        and $-16, %rsp
        call rt_fault
5:      hlt
        jmp 5b

        .section .rodata
        .balign 8
        .globl rt_isr_table
rt_isr_table:
        .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        .quad isr\n
        .endr

        .section .note.GNU-stack, "", @progbits
