// SPDX-License-Identifier: GPL-2.0
/*
 * Per-layer latency of one synchronous O_DIRECT read (HotOS'21 Table 1):
 * every probe writes (boundary, timestamp) into one ring buffer; the agent
 * (guest-agent/src/workload/layers/) attributes the events to the read
 * whose user-space window [before read(), after read()] holds them and
 * turns the boundaries into layers. The table of which probe marks which
 * boundary is in ebpf-programs/README.md; the boundary numbers are
 * `Boundary` in guest-agent/src/workload/layers/events.rs.
 *
 * A read of a file on ext4 is bracketed by ext4_file_read_iter, a read of
 * the block device itself by blkdev_read_iter; the agent attaches the pair
 * of the path it reads. Loaded and attached with aya. Filters: the syscall and file probes fire
 * for the reading thread only (target_tid), the block tracepoints for the
 * device under test only (target_dev, the kernel's dev_t). The NVMe
 * driver's probes cannot be filtered by device cheaply; the agent drops a
 * read whose window holds a boundary twice.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* Set by the loader before load (aya EbpfLoader::set_global). */
volatile const __u32 target_tid = 0;
volatile const __u32 target_dev = 0;

enum boundary {
	B_SYS_ENTER = 0,
	B_FS_ENTER = 1,
	B_BIO_QUEUE = 2,
	B_NVME_PREP_RQ = 3,
	B_RQ_ISSUE = 4,
	B_NVME_IRQ = 5,
	B_RQ_COMPLETE = 6,
	B_FS_EXIT = 7,
	B_SYS_EXIT = 8,
};

struct layer_event {
	__u64 ts;
	__u32 boundary;
	__u32 cpu;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} EVENTS SEC(".maps");

/* read(2) and pread64(2) on x86_64. */
#define NR_READ 0
#define NR_PREAD64 17

static __always_inline void emit(__u32 boundary)
{
	struct layer_event e = {
		.ts = bpf_ktime_get_ns(),
		.boundary = boundary,
		.cpu = bpf_get_smp_processor_id(),
	};

	/* No wake-up: the agent drains between reads, outside their windows. */
	bpf_ringbuf_output(&EVENTS, &e, sizeof(e), BPF_RB_NO_WAKEUP);
}

static __always_inline int is_target_thread(void)
{
	return (__u32)bpf_get_current_pid_tgid() == target_tid;
}

static __always_inline int is_read(long id)
{
	return id == NR_READ || id == NR_PREAD64;
}

SEC("tracepoint/raw_syscalls/sys_enter")
int sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	if (is_target_thread() && is_read(ctx->id))
		emit(B_SYS_ENTER);
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int sys_exit(struct trace_event_raw_sys_exit *ctx)
{
	if (is_target_thread() && is_read(ctx->id))
		emit(B_SYS_EXIT);
	return 0;
}

SEC("kprobe/ext4_file_read_iter")
int ext4_enter(struct pt_regs *ctx)
{
	if (is_target_thread())
		emit(B_FS_ENTER);
	return 0;
}

SEC("kretprobe/ext4_file_read_iter")
int ext4_exit(struct pt_regs *ctx)
{
	if (is_target_thread())
		emit(B_FS_EXIT);
	return 0;
}

/* Reads of the block device itself (no file system): the same boundaries. */
SEC("kprobe/blkdev_read_iter")
int blkdev_enter(struct pt_regs *ctx)
{
	if (is_target_thread())
		emit(B_FS_ENTER);
	return 0;
}

SEC("kretprobe/blkdev_read_iter")
int blkdev_exit(struct pt_regs *ctx)
{
	if (is_target_thread())
		emit(B_FS_EXIT);
	return 0;
}

SEC("tracepoint/block/block_bio_queue")
int bio_queue(struct trace_event_raw_block_bio *ctx)
{
	if (ctx->dev == target_dev)
		emit(B_BIO_QUEUE);
	return 0;
}

SEC("kprobe/nvme_prep_rq")
int nvme_prep_rq(struct pt_regs *ctx)
{
	emit(B_NVME_PREP_RQ);
	return 0;
}

SEC("tracepoint/block/block_rq_issue")
int rq_issue(struct trace_event_raw_block_rq *ctx)
{
	if (ctx->dev == target_dev)
		emit(B_RQ_ISSUE);
	return 0;
}

SEC("kprobe/nvme_irq")
int nvme_irq(struct pt_regs *ctx)
{
	emit(B_NVME_IRQ);
	return 0;
}

SEC("tracepoint/block/block_rq_complete")
int rq_complete(struct trace_event_raw_block_rq_completion *ctx)
{
	if (ctx->dev == target_dev)
		emit(B_RQ_COMPLETE);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
