"""Running wheels on CPUs this host is not: qemu-user in cached Debian root
file systems (rootfs) and Bochs full-system guests for x86 models QEMU lacks
(bochs). `cpubuild test` drives both."""
