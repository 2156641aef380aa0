// SPDX-License-Identifier: GPL-2.0
/*
 * B+-tree node parser for chained reads: one BPF-KV point lookup per chain
 * (layout as guest-agent/src/workload/btree/layout.rs writes it).
 *
 * A 512 B node is {u64 num, u64 type, u64 key[31], u64 ptr[31]}; the root
 * is at offset 0. On an inner node the program picks the child of the last
 * key <= the looked-up key (kept in scratch) and asks for it; on a leaf it
 * finds the key, records its value's offset and asks for the block holding
 * the value; on that block it ends the chain. Whatever goes wrong is
 * reported in scratch[BT_ERROR] and ends the chain.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "chain_abi.h"

#define FANOUT		31
#define NODE_INNER	0
#define NODE_LEAF	1

struct node {
	__u64 num;
	__u64 type;
	__u64 key[FANOUT];
	__u64 ptr[FANOUT];
};

static __always_inline int stop_with(struct storage_chain_ctx *ctx, __u64 why)
{
	ctx->scratch[BT_ERROR] = why;
	return STORAGE_CHAIN_DONE;
}

SEC("storage_chain")
int btree_lookup(struct storage_chain_ctx *ctx)
{
	struct node *n = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 key = ctx->scratch[BT_KEY];
	__u64 num, type, child = 0;
	int found = 0, exact = 0;

	/* The value's block is in the caller's buffer: done. */
	if (ctx->scratch[BT_PHASE] == BT_PHASE_VALUE)
		return STORAGE_CHAIN_DONE;
	/* The one bounds check that lets the verifier accept every read below. */
	if ((void *)(n + 1) > end)
		return stop_with(ctx, BT_ERR_SHORT);
	num = n->num;
	type = n->type;
	if (num == 0 || num > FANOUT)
		return stop_with(ctx, BT_ERR_NUM);
	if (type != NODE_INNER && type != NODE_LEAF)
		return stop_with(ctx, BT_ERR_TYPE);

	/* Unrolled, so every key and pointer is read at a constant offset. */
#pragma clang loop unroll(full)
	for (int i = 0; i < FANOUT; i++) {
		if (i >= num || n->key[i] > key)
			break;
		child = n->ptr[i];
		found = 1;
		exact = n->key[i] == key;
	}
	ctx->scratch[BT_NODES] += 1;
	if (!found)
		return stop_with(ctx, BT_ERR_NO_CHILD);
	if (type == NODE_LEAF) {
		if (!exact)
			return stop_with(ctx, BT_ERR_NO_KEY);
		ctx->scratch[BT_VALUE] = child;
		ctx->scratch[BT_PHASE] = BT_PHASE_VALUE;
		/* The block (one read's size) that holds the 64 B value. */
		ctx->next_offset = child & ~(__u64)(ctx->size - 1);
		return STORAGE_CHAIN_NEXT;
	}
	ctx->next_offset = child;
	return STORAGE_CHAIN_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
