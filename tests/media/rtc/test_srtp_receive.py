import asyncio

from media.rtc.srtp_receive import run_now


async def test_a_handler_that_never_waits_runs_to_its_end_before_run_now_returns():
    done = []

    async def handler():
        done.append(1)

    run_now(handler())
    assert done == [1]


async def test_a_handler_that_waits_is_finished_by_a_task():
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    steps = []

    async def handler():
        steps.append("before")
        steps.append(await gate)
        await asyncio.sleep(0)
        steps.append("after")

    run_now(handler())
    assert steps == ["before"]
    gate.set_result("woken")
    for _ in range(10):
        await asyncio.sleep(0)
    assert steps == ["before", "woken", "after"]
