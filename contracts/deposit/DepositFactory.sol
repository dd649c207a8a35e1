// SPDX-License-Identifier: MIT
// Deposit addresses without custody. Each checkout on a network with a
// deposit factory is paid to its own address: the CREATE2 address of a
// DepositForwarder whose only destination, fixed in its init code, is the
// business's payout wallet. Funds sent there (before or after the forwarder
// exists) can only ever move to that payout wallet: anyone may call flush,
// and no call takes any argument that could send them elsewhere. The
// service holds no key that can move them; its optional sweep key only pays
// the gas of flush.
pragma solidity 0.8.28;

/// @notice The contract behind one deposit address. Its payout is fixed at
/// creation and is part of the address (the init code holds it), so a
/// forwarder for another payout lives at another address.
contract DepositForwarder {
    address public immutable payout;

    // Custom errors, not revert strings: the forwarder's code is paid for
    // (200 gas a byte) at every deposit address's first flush.
    error NativeTransferFailed();
    error BalanceOfFailed();
    error TokenTransferFailed();

    constructor(address payout_) {
        payout = payout_;
    }

    receive() external payable {}

    /// @notice Moves this address's whole balance of token (the zero address:
    /// the native currency) to payout, and returns the amount moved.
    function flush(address token) external returns (uint256 amount) {
        if (token == address(0)) {
            amount = address(this).balance;
            if (amount > 0) {
                (bool sent, ) = payout.call{value: amount}("");
                if (!sent) revert NativeTransferFailed();
            }
            return amount;
        }
        (bool ok, bytes memory ret) = token.staticcall(abi.encodeWithSelector(0x70a08231, address(this)));
        if (!ok || ret.length < 32) revert BalanceOfFailed();
        amount = abi.decode(ret, (uint256));
        if (amount > 0) {
            // transfer(address,uint256); tokens that return nothing are accepted.
            (ok, ret) = token.call(abi.encodeWithSelector(0xa9059cbb, payout, amount));
            if (!ok || (ret.length != 0 && !abi.decode(ret, (bool)))) revert TokenTransferFailed();
        }
    }
}

/// @notice One per chain. Computes deposit addresses and flushes them.
contract DepositFactory {
    event Flushed(address indexed deposit, address indexed payout, address indexed token, uint256 amount);

    /// @notice The deposit address of (payout, salt): the CREATE2 address of
    /// DepositForwarder(payout) deployed by this factory with salt.
    function depositAddress(address payout, bytes32 salt) public view returns (address) {
        bytes32 codeHash = keccak256(abi.encodePacked(type(DepositForwarder).creationCode, abi.encode(payout)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, codeHash)))));
    }

    /// @notice Deploys the forwarder of (payout, salt) when it is not yet
    /// deployed and moves its whole balance of token (zero: native) to
    /// payout. Anyone may call it; a wrong payout names another (empty)
    /// address and moves nothing.
    function flush(address payout, bytes32 salt, address token) public returns (uint256 amount) {
        address deposit = depositAddress(payout, salt);
        if (deposit.code.length == 0) {
            new DepositForwarder{salt: salt}(payout);
        }
        amount = DepositForwarder(payable(deposit)).flush(token);
        emit Flushed(deposit, payout, token, amount);
    }

    /// @notice flush for many deposit addresses in one transaction. One that
    /// fails (a token that refuses the transfer) is skipped, not the batch:
    /// it emits no Flushed event and its funds stay where they are. An
    /// entry that ran out of gas fails the whole batch instead: otherwise
    /// eth_estimateGas would settle on a limit at which later entries run
    /// out of gas and are skipped, and a batch sent with that estimate would
    /// silently leave them unswept.
    function flushMany(address[] calldata payouts, bytes32[] calldata salts, address[] calldata tokens) external {
        require(payouts.length == salts.length && salts.length == tokens.length, "length mismatch");
        for (uint256 i = 0; i < payouts.length; i++) {
            uint256 before = gasleft();
            try this.flush(payouts[i], salts[i], tokens[i]) {} catch {
                // Each call level keeps back 1/64 of what it has, so an
                // entry that ran out of gas at any depth up to 5 (flush,
                // the forwarder's creation or flush, the token) leaves less
                // than 1/8 of `before`; a real failure leaves more, unless
                // the batch was nearly out of gas anyway.
                require(gasleft() > before / 8, "out of gas");
            }
        }
    }
}
