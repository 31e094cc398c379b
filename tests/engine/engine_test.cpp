// Event core: integer time, (time, sequence) ordering, stream FIFO, cross-rank dependencies,
// collectives that start when the last participant arrives, and deadlock reporting.
#include "sim/engine/engine.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

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

// Processor sharing: tasks overlapping on one resource share its rate; work is conserved.
TEST(Engine, SharedResourceSplitsBandwidth) {
  TaskGraph g(2);
  const uint32_t link = g.add_resource("link");
  Task a = on(0, 10, Stream::kDp);
  a.resource = link;
  Task b = on(1, 10, Stream::kDp);
  b.resource = link;
  const TaskId ia = g.add(a);
  const TaskId delay = g.add(on(1, 5));
  const TaskId ib = g.add(b);
  g.depend(delay, ib);  // b starts at 5
  Engine e(g);
  const RunStats st = e.run();
  // 0-5: a alone (5 done); 5-15: both at half rate (a finishes); 15-20: b alone.
  EXPECT_EQ(e.finish_times()[ia], 15);
  EXPECT_EQ(e.start_times()[ib], 5);
  EXPECT_EQ(e.finish_times()[ib], 20);
  EXPECT_EQ(st.makespan, 20);
}

TEST(Engine, SimultaneousSharersFinishTogether) {
  TaskGraph g(1);
  const uint32_t link = g.add_resource("nic");
  Task a = on(0, 10, Stream::kDp);
  a.resource = link;
  Task b = on(0, 10, Stream::kDpReduce);
  b.resource = link;
  const TaskId ia = g.add(a), ib = g.add(b);
  Engine e(g);
  e.run();
  EXPECT_EQ(e.finish_times()[ia], 20);
  EXPECT_EQ(e.finish_times()[ib], 20);
}

}  // namespace
}  // namespace stepcast::engine
