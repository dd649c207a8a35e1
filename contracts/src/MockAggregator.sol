// SPDX-License-Identifier: MIT
// A Chainlink-compatible price feed for tests and the dev chain: the
// AggregatorV3Interface reads (decimals, latestRoundData) with an answer and
// an updatedAt anyone may set. Test use only.
pragma solidity 0.8.28;

contract MockAggregator {
    uint8 public decimals;
    string public description;
    uint256 public constant version = 4;
    uint80 public roundId;
    int256 public answer;
    uint256 public updatedAt;

    constructor(uint8 decimals_, string memory description_) {
        decimals = decimals_;
        description = description_;
    }

    // set records a new round: answer as of updatedAt_ (a unix time).
    function set(int256 answer_, uint256 updatedAt_) external {
        roundId += 1;
        answer = answer_;
        updatedAt = updatedAt_;
    }

    function latestRoundData()
        external
        view
        returns (uint80, int256, uint256, uint256, uint80)
    {
        return (roundId, answer, updatedAt, updatedAt, roundId);
    }
}
