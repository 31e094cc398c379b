// Event core: integer time, (time, sequence) ordering, stream FIFO, cross-rank dependencies,
// collectives that start when the last participant arrives, and deadlock reporting.
#include "sim/engine/engine.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace stepcast::engine {
namespace {

Task on(int32_t rank, Tick dur, Stream s = Stream::kCompute) {
  Task t;
  t.rank = rank;
  t.duration = dur;
  t.stream = s;
  return t;
}

TEST(Engine, StreamRunsTasksInOrder) {
  TaskGraph g(1);
  const TaskId a = g.add(on(0, 5));
  const TaskId b = g.add(on(0, 7));
  Engine e(g);
  const RunStats st = e.run();
  EXPECT_EQ(e.start_times()[a], 0);
  EXPECT_EQ(e.start_times()[b], 5);
  EXPECT_EQ(st.makespan, 12);
  EXPECT_EQ(st.tasks_run, 2u);
}

TEST(Engine, StreamsRunConcurrentlyUntilADependency) {
  TaskGraph g(1);
  const TaskId comp = g.add(on(0, 10));
  const TaskId comm = g.add(on(0, 4, Stream::kDp));
  const TaskId after = g.add(on(0, 1));
  g.depend(comm, after);  // already implied by compute order for comp
  Engine e(g);
  e.run();
  EXPECT_EQ(e.start_times()[comm], 0);  // overlaps the compute task
  EXPECT_EQ(e.start_times()[after], 10);
  EXPECT_EQ(e.finish_times()[comp], 10);
}

// A collective running beside compute on the same rank takes its share of the GPU: the
// compute progresses at (1 - share) while the collective is in flight, full speed after.
// Communication on another rank, or blocking on the compute stream, slows nothing.
TEST(Engine, CommunicationBesideComputeSlowsIt) {
  auto build = [](TaskGraph& g, double share) {
    g.set_comm_compute_share(share);
    const TaskId comp = g.add(on(0, 10'000));
    Task comm = on(0, 4'000, Stream::kDp);
    comm.kind = TaskKind::kDpComm;
    g.add(comm);
    const TaskId other = g.add(on(1, 10'000));
    Task blocking = on(1, 4'000, Stream::kCompute);
    blocking.kind = TaskKind::kTpComm;
    g.add(blocking);
    return std::pair{comp, other};
  };
  TaskGraph g(2);
  const auto [comp, other] = build(g, 0.25);
  Engine e(g);
  e.run();
  // 4,000 ticks at 0.75 leave 7,000 of work at full speed: 4,000 + 7,000.
  EXPECT_EQ(e.finish_times()[comp], 11'000);
  EXPECT_EQ(e.finish_times()[other], 10'000);
  TaskGraph plain(2);
  const auto [comp0, other0] = build(plain, 0.0);
  Engine e0(plain);
  e0.run();
  EXPECT_EQ(e0.finish_times()[comp0], 10'000);
}

// A compute task that starts while a collective is already in flight starts slowed.
TEST(Engine, ComputeStartingDuringCommunicationIsSlowed) {
  TaskGraph g(1);
  g.set_comm_compute_share(0.5);
  Task comm = on(0, 6'000, Stream::kDp);
  comm.kind = TaskKind::kDpComm;
  g.add(comm);
  g.add(on(0, 1'000));
  const TaskId b = g.add(on(0, 5'000));
  Engine e(g);
  e.run();
  // The first task takes 2,000 at half speed; the second does 2,000 of work by 6,000 and the
  // remaining 3,000 at full speed.
  EXPECT_EQ(e.start_times()[b], 2'000);
  EXPECT_EQ(e.finish_times()[b], 9'000);
}

// A data-parallel collective issued on its own stream while a compute kernel holds the SMs
// waits for that kernel: the kernel in flight (its share of the task) times n / (n + 1) for a
// group of n. Issued as a compute task starts (its input ready at a task boundary), it waits
// for the next task's kernel; with the compute stream idle, or with the switch off, it starts
// at once.
TEST(Engine, CollectiveWaitsForTheComputeKernelInFlight) {
  auto run = [](bool waits, bool next_compute) {
    TaskGraph g(1);
    g.set_comm_waits_for_kernels(waits);
    Task first = on(0, 10'000);
    first.kernel = g.kernel_share_index(0.1);
    const TaskId a = g.add(first);
    if (next_compute) {
      Task second = on(0, 20'000);
      second.kernel = g.kernel_share_index(0.2);  // 4,000-tick kernels
      g.add(second);
    }
    const uint32_t c = g.add_collective(3'000, g.intern("all-reduce"), 8);
    Task comm = on(0, 3'000, Stream::kDpReduce);
    comm.kind = TaskKind::kDpComm;
    const TaskId id = g.add(comm);
    g.join(c, id);
    g.depend(a, id);
    Engine e(g);
    e.run();
    return e.start_times()[id];
  };
  EXPECT_EQ(run(true, true), 10'000 + 4'000 * 8 / 9);
  EXPECT_EQ(run(true, false), 10'000);
  EXPECT_EQ(run(false, true), 10'000);
}

TEST(Engine, CollectiveStartsWhenLastParticipantArrives) {
  TaskGraph g(3);
  g.add(on(0, 10));
  g.add(on(1, 30));  // the slow rank
  g.add(on(2, 20));
  const uint32_t c = g.add_collective(5, g.intern("all-reduce"));
  TaskId parts[3];
  for (int r = 0; r < 3; ++r) {
    parts[r] = g.add(on(r, 0));
    g.join(c, parts[r]);
  }
  struct Waits : Observer {
    Tick total = 0;
    void on_start(const TaskGraph&, TaskId, Tick ready, Tick start) override { total += start - ready; }
  } waits;
  Engine e(g);
  e.add_observer(&waits);
  const RunStats st = e.run();
  for (TaskId p : parts) {
    EXPECT_EQ(e.start_times()[p], 30);
    EXPECT_EQ(e.finish_times()[p], 35);
  }
  EXPECT_EQ(st.makespan, 35);
  EXPECT_EQ(waits.total, (30 - 10) + (30 - 20));  // the others waited for rank 1
}

TEST(Engine, TiesResolveInInsertionOrder) {
  // Two ranks finish at the same time; the observer sees finishes in task order every run.
  struct Order : Observer {
    std::string seen;
    void on_finish(const TaskGraph&, TaskId id, Tick) override { seen += std::to_string(id) + ","; }
  };
  std::string first;
  for (int run = 0; run < 3; ++run) {
    TaskGraph g(2);
    g.add(on(0, 3));
    g.add(on(1, 3));
    g.add(on(0, 2));
    g.add(on(1, 2));
    Order o;
    Engine e(g);
    e.add_observer(&o);
    e.run();
    if (run == 0) first = o.seen;
    EXPECT_EQ(o.seen, first);
  }
  EXPECT_EQ(first, "0,1,2,3,");
}

TEST(Engine, DeadlockNamesTheStuckTask) {
  TaskGraph g(2);
  const uint32_t c = g.add_collective(1, g.intern("lonely all-reduce"));
  TaskId t = g.add(on(0, 0));
  t = t;  // rank 1 never joins
  g.join(c, t);
  g.task(t).name = g.intern("lonely all-reduce");
  // Declare two participants although only one exists.
  const TaskId t2 = g.add(on(1, 1));
  const TaskId blocker = g.add(on(1, 1));
  g.depend(blocker, t2);  // cycle: t2 before blocker on the stream, blocker before t2 here
  Engine e(g);
  try {
    e.run();
    FAIL() << "expected a deadlock error";
  } catch (const std::runtime_error& err) {
    EXPECT_NE(std::string(err.what()).find("deadlock"), std::string::npos) << err.what();
  }
}

TEST(Engine, TicksArePicoseconds) {
  EXPECT_EQ(to_ticks(1.0), 1'000'000'000'000);
  EXPECT_EQ(to_ticks(2e-6), 2'000'000);
  EXPECT_DOUBLE_EQ(to_seconds(to_ticks(0.125)), 0.125);
}

// Link capacities in bytes per second; 1e12 B/s moves one byte per tick (picosecond).
constexpr double kBytePerTick = 1e12;

// Two flows on one link each get half of it; work is conserved when one starts later.
TEST(Engine, TwoFlowsOnOneLinkEachGetHalf) {
  TaskGraph g(2);
  const uint32_t link = g.add_link("link", kBytePerTick);
  const TaskId ia = g.add(on(0, 10, Stream::kDp));
  const TaskId delay = g.add(on(1, 5));
  const TaskId ib = g.add(on(1, 10, Stream::kDp));
  g.set_flow(ia, 10, {link});
  g.set_flow(ib, 10, {link});
  g.depend(delay, ib);  // b starts at 5
  Engine e(g);
  const RunStats st = e.run();
  // 0-5: a alone (5 bytes); 5-15: both at half rate (a finishes); 15-20: b alone.
  EXPECT_EQ(e.finish_times()[ia], 15);
  EXPECT_EQ(e.start_times()[ib], 5);
  EXPECT_EQ(e.finish_times()[ib], 20);
  EXPECT_EQ(st.makespan, 20);
}

TEST(Engine, SimultaneousFlowsFinishTogether) {
  TaskGraph g(1);
  const uint32_t link = g.add_link("nic", kBytePerTick);
  const TaskId ia = g.add(on(0, 10, Stream::kDp)), ib = g.add(on(0, 10, Stream::kDpReduce));
  g.set_flow(ia, 10, {link});
  g.set_flow(ib, 10, {link});
  Engine e(g);
  e.run();
  EXPECT_EQ(e.finish_times()[ia], 20);
  EXPECT_EQ(e.finish_times()[ib], 20);
}

// Max-min fairness across links: B (4 B/tick) is the bottleneck of flows 2 and 3, which get
// 2 each; flow 1 then takes what flow 2 leaves of A (10 - 2 = 8), not an equal 5.
TEST(Engine, MaxMinFairnessAcrossLinks) {
  TaskGraph g(3);
  const uint32_t a = g.add_link("A", 10 * kBytePerTick), b = g.add_link("B", 4 * kBytePerTick);
  const TaskId f1 = g.add(on(0, 1, Stream::kDp)), f2 = g.add(on(1, 1, Stream::kDp)), f3 = g.add(on(2, 1, Stream::kDp));
  g.set_flow(f1, 80, {a});
  g.set_flow(f2, 20, {a, b});
  g.set_flow(f3, 20, {b});
  Engine e(g);
  e.run();
  EXPECT_EQ(e.finish_times()[f1], 10);
  EXPECT_EQ(e.finish_times()[f2], 10);
  EXPECT_EQ(e.finish_times()[f3], 10);
}

// A flow never runs faster than its own rate alone (bytes / duration): a latency-bound
// transfer using a fifth of the link leaves the rest to a bulk flow.
TEST(Engine, FlowKeepsItsOwnRateCap) {
  TaskGraph g(2);
  const uint32_t l = g.add_link("L", 10 * kBytePerTick);
  const TaskId small = g.add(on(0, 10, Stream::kDp)), bulk = g.add(on(1, 1, Stream::kDp));
  g.set_flow(small, 20, {l});  // 2 B/tick alone
  g.set_flow(bulk, 80, {l});   // link-bound
  Engine e(g);
  e.run();
  EXPECT_EQ(e.finish_times()[small], 10);  // unaffected
  EXPECT_EQ(e.finish_times()[bulk], 10);   // 8 B/tick
}

// A collective whose participants are flows ends for all of them when the slowest is done.
TEST(Engine, FlowCollectiveEndsWithSlowestParticipant) {
  TaskGraph g(2);
  const uint32_t fast = g.add_link("fast", 2 * kBytePerTick), slow = g.add_link("slow", kBytePerTick);
  const uint32_t c = g.add_collective(10, g.intern("all-reduce"));
  const TaskId p0 = g.add(on(0, 0, Stream::kDp)), p1 = g.add(on(1, 0, Stream::kDp));
  g.join(c, p0);
  g.join(c, p1);
  g.set_flow(p0, 20, {fast});  // 10 ticks
  g.set_flow(p1, 20, {slow});  // capped at 1 B/tick: 20 ticks
  const TaskId after = g.add(on(0, 1));
  g.depend(p0, after);
  Engine e(g);
  e.run();
  EXPECT_EQ(e.finish_times()[p0], 20);
  EXPECT_EQ(e.finish_times()[p1], 20);
  EXPECT_EQ(e.finish_times()[after], 21);
}

}  // namespace
}  // namespace stepcast::engine
