// spindle/spindle.hpp — the whole public API.
#pragma once

#include <spindle/arch/context.hpp>
#include <spindle/locks/guard.hpp>
#include <spindle/locks/locks.hpp>
#include <spindle/memory/stack.hpp>
#include <spindle/runtime/fiber.hpp>
#include <spindle/runtime/fiber_local.hpp>
#include <spindle/runtime/generator.hpp>
#include <spindle/runtime/scheduler.hpp>
#include <spindle/sync/barrier.hpp>
#include <spindle/sync/channel.hpp>
#include <spindle/sync/condition_variable.hpp>
#include <spindle/sync/condition_variable_any.hpp>
#include <spindle/sync/counting_semaphore.hpp>
#include <spindle/sync/cqs_mutex.hpp>
#include <spindle/sync/event.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/latch.hpp>
#include <spindle/sync/mutex.hpp>
#include <spindle/sync/pool.hpp>
#include <spindle/sync/shared_mutex.hpp>
